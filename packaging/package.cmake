# The Debian package (CPack DEB), the man pages and the generated configuration reference.
# `cmake --build build --target package` writes build/idemgate_<version>-1_amd64.deb (configure with
# -DIDEMGATE_BUILD_TESTS=OFF to build only what it holds). Included at the end of the top-level
# CMakeLists.txt.
set(PKG_DIR ${CMAKE_SOURCE_DIR}/packaging)
set(PKG_OUT ${CMAKE_BINARY_DIR}/packaging)
file(MAKE_DIRECTORY ${PKG_OUT})

# ----- The configuration reference: docs/configuration.md and idemgate.toml(5) -----
add_executable(idemgate-config-reference ${CMAKE_SOURCE_DIR}/tools/config_reference_main.cc)
target_link_libraries(idemgate-config-reference PRIVATE idemgate_conf)

# The Debian revision (the package is not the upstream tarball: changelog.Debian.gz); the
# newest entry of packaging/changelog names this version and gives the man pages their date.
set(PKG_REVISION 1)
file(STRINGS ${PKG_DIR}/changelog PKG_HEAD LIMIT_COUNT 1)
if(NOT PKG_HEAD MATCHES "^idemgate \\(${PROJECT_VERSION}-${PKG_REVISION}\\) ")
  message(FATAL_ERROR "packaging/changelog: the first entry is not ${PROJECT_VERSION}-${PKG_REVISION}")
endif()
file(STRINGS ${PKG_DIR}/changelog PKG_TRAILER REGEX "^ -- " LIMIT_COUNT 1)
if(NOT PKG_TRAILER MATCHES ", ([0-9][0-9]) ([A-Z][a-z][a-z]) ([0-9][0-9][0-9][0-9]) ")
  message(FATAL_ERROR "packaging/changelog: no date in its first trailer line")
endif()
set(PKG_DAY ${CMAKE_MATCH_1})
set(PKG_YEAR ${CMAKE_MATCH_3})
list(FIND "Jan;Feb;Mar;Apr;May;Jun;Jul;Aug;Sep;Oct;Nov;Dec" ${CMAKE_MATCH_2} PKG_MONTH)
math(EXPR PKG_MONTH "${PKG_MONTH} + 1" OUTPUT_FORMAT DECIMAL)
if(PKG_MONTH LESS 10)
  set(PKG_MONTH 0${PKG_MONTH})
endif()
set(IDEMGATE_DATE ${PKG_YEAR}-${PKG_MONTH}-${PKG_DAY})
set(IDEMGATE_VERSION ${PROJECT_VERSION})
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${PKG_DIR}/changelog)

# Man pages and the changelog, compressed as Debian installs them (gzip -9n: reproducible).
configure_file(${PKG_DIR}/idemgate.8 ${PKG_OUT}/idemgate.8 @ONLY)
configure_file(${PKG_DIR}/changelog ${PKG_OUT}/changelog.Debian COPYONLY)
add_custom_command(OUTPUT ${PKG_OUT}/idemgate.toml.5
  COMMAND sh -c "\"$0\" man \"$1\" \"$2\" > \"$3\"" $<TARGET_FILE:idemgate-config-reference>
          ${PROJECT_VERSION} ${IDEMGATE_DATE} ${PKG_OUT}/idemgate.toml.5
  DEPENDS idemgate-config-reference VERBATIM)
set(PKG_GZ)
foreach(f idemgate.toml.5 idemgate.8 changelog.Debian)
  add_custom_command(OUTPUT ${PKG_OUT}/${f}.gz COMMAND gzip -9nkf ${PKG_OUT}/${f}
    DEPENDS ${PKG_OUT}/${f} VERBATIM)
  list(APPEND PKG_GZ ${PKG_OUT}/${f}.gz)
endforeach()
add_custom_target(idemgate_package_docs ALL DEPENDS ${PKG_GZ})

# Rewrites docs/configuration.md from the key table (the config_reference_doc test fails until
# it is run after a key changes): cmake --build build --target configuration_md
add_custom_target(configuration_md
  COMMAND sh -c "\"$0\" md > \"$1\"" $<TARGET_FILE:idemgate-config-reference>
          ${CMAKE_SOURCE_DIR}/docs/configuration.md VERBATIM)

# ----- What the package installs -----
# The installed config: packaging/idemgate.toml with the store in the unit's StateDirectory.
file(READ ${PKG_DIR}/idemgate.toml PKG_CONFIG_TEXT)
string(REPLACE "path = \"./data\"" "path = \"/var/lib/idemgate/data\"" PKG_CONFIG_OUT
  "${PKG_CONFIG_TEXT}")
if(PKG_CONFIG_OUT STREQUAL PKG_CONFIG_TEXT)
  message(FATAL_ERROR "packaging: packaging/idemgate.toml has no 'path = \"./data\"' line to rewrite")
endif()
file(WRITE ${PKG_OUT}/idemgate.toml "${PKG_CONFIG_OUT}")
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${PKG_DIR}/idemgate.toml)

# Full RELRO for the installed binary (lintian: hardening-no-bindnow).
target_link_options(idemgate PRIVATE -Wl,-z,relro,-z,now)
install(TARGETS idemgate RUNTIME DESTINATION bin)
install(FILES ${PKG_OUT}/idemgate.toml DESTINATION /etc/idemgate
  PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ)
install(FILES ${PKG_DIR}/idemgate.service DESTINATION /lib/systemd/system)
install(FILES ${PKG_OUT}/idemgate.8.gz DESTINATION share/man/man8)
install(FILES ${PKG_OUT}/idemgate.toml.5.gz DESTINATION share/man/man5)
install(FILES ${CMAKE_SOURCE_DIR}/README.md ${PKG_DIR}/idemgate.toml ${PKG_DIR}/copyright
  ${PKG_OUT}/changelog.Debian.gz DESTINATION share/doc/idemgate)
# The README links into docs/: install it beside the README so the links hold in the package.
install(DIRECTORY ${CMAKE_SOURCE_DIR}/docs DESTINATION share/doc/idemgate)

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME idemgate)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "idemgate maintainers <maintainers@idemgate.dev>")
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "idemgate maintainers <maintainers@idemgate.dev>")
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "https://github.com/idemgate/idemgate")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "idempotency gateway making HTTP APIs safe to retry")
# The extended description; CPack puts the summary above it as the synopsis line.
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION "idemgate is a reverse proxy in front of an HTTP API. A POST or PATCH that
carries an Idempotency-Key header is executed by the upstream at most once
per key; every retry gets the stored first answer, a retry with a different
request gets 422, and one that arrives while the first is in flight gets 409
or waits for the first answer.
.
The records live in an embedded RocksDB store (one instance) or in a
PostgreSQL database shared by several instances. The package installs the
gateway, a hardened systemd unit (not enabled until configured) and the man
pages idemgate(8) and idemgate.toml(5).")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_PACKAGE_DIRECTORY ${CMAKE_BINARY_DIR})
set(CPACK_DEBIAN_PACKAGE_RELEASE ${PKG_REVISION})
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # idemgate_<version>-1_amd64.deb
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)  # librocksdb, libevent, libssl, libstdc++ from the binary
# adduser: postinst makes the user; init-system-helpers: deb-systemd-helper/-invoke.
set(CPACK_DEBIAN_PACKAGE_DEPENDS "adduser, init-system-helpers (>= 1.54~)")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
  ${PKG_DIR}/conffiles ${PKG_DIR}/postinst ${PKG_DIR}/prerm ${PKG_DIR}/postrm)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)

# ----- Tests -----
# tests/package/package_test.sh installs the package for real (root; skipped otherwise), with
# lintian when it is installed.
add_test(NAME package_deb
  COMMAND ${CMAKE_SOURCE_DIR}/tests/package/package_test.sh ${CMAKE_BINARY_DIR} ${PROJECT_VERSION})
set_tests_properties(package_deb PROPERTIES SKIP_RETURN_CODE 77 RUN_SERIAL ON TIMEOUT 300
  LABELS package)
# docs/configuration.md is what the generator prints from the key table.
add_test(NAME config_reference_doc
  COMMAND sh -c "\"$0\" md | diff -u \"$1\" - && echo 'docs/configuration.md is up to date' ||
                 { echo 'docs/configuration.md differs: cmake --build build --target configuration_md'; exit 1; }"
          $<TARGET_FILE:idemgate-config-reference> ${CMAKE_SOURCE_DIR}/docs/configuration.md)
# Every tracked source file carries the SPDX line (scripts/spdx adds it); the script's self-test.
add_test(NAME spdx_headers COMMAND ${CMAKE_SOURCE_DIR}/scripts/spdx --check)
add_test(NAME spdx_script COMMAND ${CMAKE_SOURCE_DIR}/tests/package/spdx_test.sh ${CMAKE_SOURCE_DIR})
# The container image, built (scripts/image) and run with podman (root; skipped otherwise). The
# first run makes the Debian base with mmdebstrap (minutes); later runs reuse build/image/.
add_test(NAME container_image
  COMMAND ${CMAKE_SOURCE_DIR}/tests/package/image_test.sh ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR})
set_tests_properties(container_image PROPERTIES SKIP_RETURN_CODE 77 RUN_SERIAL ON TIMEOUT 900
  LABELS "package;image")
