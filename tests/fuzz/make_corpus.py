# SPDX-License-Identifier: Apache-2.0
# Writes the hand-written seed corpus: tests/fuzz/corpus/<target>/ (run from anywhere).
import os, struct
root=os.path.join(os.path.dirname(os.path.abspath(__file__)), 'corpus')
def w(target, name, data):
    d=os.path.join(root,target); os.makedirs(d,exist_ok=True)
    if isinstance(data,str): data=data.encode('latin-1')
    open(os.path.join(d,name),'wb').write(data)
C='\r\n'
def req(*lines, body=''):
    return C.join(lines)+C+C+body
A='Authorization: Bearer tok_alice'
rq = {
 'get': '0a'+req('GET /v1/ping HTTP/1.1','Host: api'),
 'post_key': '0b'+req('POST /payments HTTP/1.1','Host: api',A,'Idempotency-Key: k-1','Content-Type: application/json','Content-Length: 13',body='{"amount":10}'),
 'post_key_strict': '1b'+req('POST /payments?x=1 HTTP/1.1','Host: api',A,'Idempotency-Key: "k\\"q"','Content-Type: application/json','X-Tenant: t1','Content-Length: 2',body='{}'),
 'require_key_missing': '1c'+req('PATCH /payments/7 HTTP/1.1','Host: api',A,'Content-Length: 2',body='{}'),
 'no_credential': '0d'+req('POST /p HTTP/1.1','Host: api','Authorization: Bearer ','Idempotency-Key: k','Content-Length: 0'),
 'two_keys': '0e'+req('POST /p HTTP/1.1','Host: api',A,'Idempotency-Key: a','Idempotency-Key: b','Content-Length: 0'),
 'key_with_space': '0f'+req('POST /p HTTP/1.1','Host: api',A,'Idempotency-Key: "a b"','Content-Length: 0'),
 'chunked': '0g'+'POST /payments HTTP/1.1\r\nHost: api\r\n'+A+'\r\nIdempotency-Key: c1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n',
 'pipelined': '0h'+req('GET /a HTTP/1.1','Host: api')+req('POST /b HTTP/1.1','Host: api','Content-Length: 3',body='abc')+req('DELETE /c HTTP/1.1','Host: api','Connection: close')+'GET /after-close HTTP/1.1\r\n\r\n',
 'cl_te': '0i'+req('POST /p HTTP/1.1','Host: api','Content-Length: 4','Transfer-Encoding: chunked',body='0\r\n\r\n'),
 'two_cl': '0j'+req('POST /p HTTP/1.1','Host: api','Content-Length: 3','Content-Length: 4',body='abcd'),
 'te_gzip_chunked': '0k'+req('POST /p HTTP/1.1','Host: api','Transfer-Encoding: gzip, chunked',body='0\r\n\r\n'),
 'obs_fold': '0l'+req('POST /p HTTP/1.1','Host: api','X-A: one',' two','Content-Length: 0'),
 'bare_lf': '0m'+'GET / HTTP/1.1\nHost: api\n\n',
 'bare_cr': '0n'+'GET / HTTP/1.1\r\nHost: a\rpi\r\n\r\n',
 'expect_continue': '0o'+req('POST /p HTTP/1.1','Host: api','Expect: 100-continue','Content-Length: 2',body='{}'),
 'http10': '0p'+req('POST /p HTTP/1.0','Connection: keep-alive','Content-Length: 1',body='x')+req('GET /q HTTP/1.0'),
 'upgrade_h2c': '0q'+req('GET / HTTP/1.1','Host: api','Connection: Upgrade, HTTP2-Settings','Upgrade: h2c','HTTP2-Settings: AAMAAABkAAQAAP__'),
 'connect': '0r'+req('CONNECT api:443 HTTP/1.1','Host: api:443'),
 'small_limits': '2s'+req('POST /p HTTP/1.1','Host: api','X-Long: '+'a'*300,'Content-Length: 100',body='b'*100),
 'hop_by_hop': '0t'+req('POST /p HTTP/1.1','Host: api','Connection: X-Secret, Keep-Alive','X-Secret: s','Keep-Alive: 5','Proxy-Authorization: x','X-Forwarded-For: 10.0.0.1','X-Forwarded-Proto: https','Content-Length: 0'),
 'http2_version': '0u'+req('GET / HTTP/2.0','Host: api'),
 'bad_header_name': '0v'+req('GET / HTTP/1.1','Host: api','Bad Name: x'),
 'leading_crlf': '0w'+'\r\n\r\n'+req('GET / HTTP/1.1','Host: api'),
 'chunk_ext_big': '2x'+'POST /p HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffffff\r\n',
 'scope_header_twice': '1y'+req('POST /v1/charges HTTP/1.1',A,A,'Idempotency-Key: k','Content-Length: 0'),
}
for k,v in rq.items(): w('request_fuzz',k,v)
rs = {
 'ok_cl': '0a'+req('HTTP/1.1 201 Created','Content-Type: application/json','Content-Length: 11',body='{"id":"p1"}'),
 'chunked_trailer': '0b'+'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-A: 1\r\n\r\n3\r\nabc\r\n0\r\nX-T: 2\r\n\r\n',
 'close_delimited': '0c'+'HTTP/1.1 200 OK\r\nX-A: 1\r\n\r\nbody until close',
 'http10_close': '0d'+'HTTP/1.0 200 OK\r\n\r\nold style',
 'interim_100': '4e'+'HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n'+req('HTTP/1.1 202 Accepted','Content-Length: 2',body='ok'),
 'no_content_204': '8f'+req('HTTP/1.1 204 No Content','X-A: 1'),
 'not_modified_304': '0g'+req('HTTP/1.1 304 Not Modified','ETag: "x"','Content-Length: 10'),
 'head_with_length': '1h'+req('HTTP/1.1 200 OK','Content-Length: 1234'),
 'switching_101': '0i'+req('HTTP/1.1 101 Switching Protocols','Upgrade: websocket','Connection: Upgrade'),
 'connection_listed': '0j'+req('HTTP/1.1 200 OK','Connection: keep-alive, X-Hop','X-Hop: 1','Keep-Alive: timeout=5','Proxy-Foo: b','Set-Cookie: a=1','Set-Cookie: b=2','Content-Length: 0'),
 'te_gzip': '0k'+'HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n1\r\nz\r\n0\r\n\r\n',
 'empty_reason': '0l'+req('HTTP/1.1 402 ','Content-Length: 1',body='x'),
 'too_large': '2m'+req('HTTP/1.1 200 OK','Content-Length: 100',body='y'*100),
 'truncated': '0n'+'HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc',
 'nothing': '0o',
 'custom_status': '0p'+req('HTTP/1.1 599 Whatever You Like','Content-Length: 0'),
 'cl_and_te': '0q'+req('HTTP/1.1 200 OK','Content-Length: 3','Transfer-Encoding: chunked',body='0\r\n\r\n'),
}
for k,v in rs.items(): w('response_fuzz',k,v)
def rec(state, attempt, owner, created, expires, lease, fp, status, reason, headers, body, version=1):
    out=struct.pack('<BBIQqqq',version,state,attempt,owner,created,expires,lease)+fp
    out+=struct.pack('<H',status)+struct.pack('<I',len(reason))+reason
    out+=struct.pack('<I',len(headers))
    for n,v in headers: out+=struct.pack('<I',len(n))+n+struct.pack('<I',len(v))+v
    out+=struct.pack('<I',len(body))+body
    return out
fp=bytes(range(32))
w('record_fuzz','in_flight',rec(1,1,0x1122334455667788,1700000000000,1700086400000,1700000030000,fp,0,b'',[],b''))
c=rec(2,2,42,1700000000000,1700086400000,0,fp,201,b'Created',[(b'Content-Type',b'application/json'),(b'X-Request-Id',b'r-1')],b'{"id":"pay_1","amount":10}')
w('record_fuzz','completed',c)
w('record_fuzz','completed_no_headers',rec(2,1,7,5,10,0,bytes(32),204,b'No Content',[],b''))
w('record_fuzz','truncated',c[:-5])
w('record_fuzz','trailing_byte',c+b'\0')
w('record_fuzz','unknown_version',rec(1,1,1,1,1,1,fp,0,b'',[],b'',version=2))
w('record_fuzz','bad_state',rec(3,1,1,1,1,1,fp,0,b'',[],b''))
w('record_fuzz','negative_times',rec(2,0,0,-1,-5,-9,fp,65535,b'\xff\x00',[(b'',b'')],b'\x00\x01'))
w('record_fuzz','header_only',c[:70])
