# The Debian package (CPack DEB): `cmake --build build --target package` writes
# build/idemgate_<version>_amd64.deb. Included at the end of the top-level CMakeLists.txt.
set(PKG_DIR ${CMAKE_SOURCE_DIR}/packaging)
# `package` builds everything first; cpack run by itself (tests/package) packages the binary
# already built instead of building every test target first.
set(CMAKE_SKIP_INSTALL_ALL_DEPENDENCY ON)

# The installed config: conf/idemgate.toml with the store in the unit's StateDirectory.
file(READ ${CMAKE_SOURCE_DIR}/conf/idemgate.toml PKG_CONFIG_TEXT)
string(REPLACE "path = \"./data\"" "path = \"/var/lib/idemgate/data\"" PKG_CONFIG_OUT
  "${PKG_CONFIG_TEXT}")
if(PKG_CONFIG_OUT STREQUAL PKG_CONFIG_TEXT)
  message(FATAL_ERROR "packaging: conf/idemgate.toml has no 'path = \"./data\"' line to rewrite")
endif()
file(WRITE ${CMAKE_BINARY_DIR}/packaging/idemgate.toml "${PKG_CONFIG_OUT}")
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
  ${CMAKE_SOURCE_DIR}/conf/idemgate.toml)

install(TARGETS idemgate RUNTIME DESTINATION bin)
install(FILES ${CMAKE_BINARY_DIR}/packaging/idemgate.toml DESTINATION /etc/idemgate
  PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ)
install(FILES ${CMAKE_SOURCE_DIR}/conf/idemgate.service DESTINATION /lib/systemd/system)
install(FILES ${CMAKE_SOURCE_DIR}/README.md ${CMAKE_SOURCE_DIR}/conf/idemgate.toml
  DESTINATION share/doc/idemgate)
# The README links into docs/: install it beside the README so the links hold in the package.
install(DIRECTORY ${CMAKE_SOURCE_DIR}/docs DESTINATION share/doc/idemgate)

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME idemgate)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "idemgate maintainers <idemgate@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
  "idempotency gateway: makes an HTTP API safe to retry with Idempotency-Key")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_PACKAGE_DIRECTORY ${CMAKE_BINARY_DIR})
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # idemgate_<version>_amd64.deb
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)  # librocksdb, libevent, libssl, libstdc++ from the binary
set(CPACK_DEBIAN_PACKAGE_DEPENDS "adduser")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
  ${PKG_DIR}/conffiles ${PKG_DIR}/postinst ${PKG_DIR}/prerm ${PKG_DIR}/postrm)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)

# tests/package/package_test.sh installs the package for real (root; skipped otherwise).
add_test(NAME package_deb
  COMMAND ${CMAKE_SOURCE_DIR}/tests/package/package_test.sh ${CMAKE_BINARY_DIR} ${PROJECT_VERSION})
set_tests_properties(package_deb PROPERTIES SKIP_RETURN_CODE 77 RUN_SERIAL ON TIMEOUT 300
  LABELS package)
