// SPDX-License-Identifier: Apache-2.0
// An HTTP/2 client on Node's own `http2` module, for tests/integration/http2_clients_test.cc:
// one session (one connection), and on it the seed transcript or fifty concurrent streams
// with one key. Prints one line per answer, "<status> <idempotent-replayed> <body>".
//   node h2_client.js URL CA_FILE seed|fifty KEY
'use strict';
const http2 = require('http2');
const fs = require('fs');

const [url, caFile, mode, key] = process.argv.slice(2);
const session = http2.connect(url, { ca: fs.readFileSync(caFile) });
session.on('error', (err) => {
  console.log('error: ' + err.message);
  process.exit(2);
});
const path = new URL(url).pathname;

function post(body) {
  return new Promise((resolve) => {
    const stream = session.request({
      ':method': 'POST',
      ':path': path,
      authorization: 'Bearer merchant-demo',
      'idempotency-key': key,
      'content-type': 'application/json',
    });
    let status = 0;
    let replayed = '-';
    const chunks = [];
    stream.on('response', (headers) => {
      status = headers[':status'];
      replayed = headers['idempotent-replayed'] || '-';
    });
    stream.on('data', (chunk) => chunks.push(chunk));
    stream.on('end', () => resolve(`${status} ${replayed} ${Buffer.concat(chunks)}`));
    stream.on('error', (err) => resolve('error: ' + err.message));
    stream.end(body);
  });
}

async function main() {
  const body = '{"amount":"100000000"}';
  let lines = [];
  if (mode === 'seed') {
    for (const b of [body, body, '{"amount":"999000000"}']) lines.push(await post(b));
  } else {
    lines = await Promise.all(Array.from({ length: 50 }, () => post(body)));
  }
  for (const line of lines) console.log(line);
  session.close();
}

main();
