"""A pyzmq (libzmq) billing producer for keybrake's ZeroMQ workers.

Usage: interop.py req|dealer ENDPOINT NAMESPACE CUSTOMER
       interop.py push NAMESPACE CUSTOMER   (binds the ack PULL on a random
       port, prints "ack tcp://127.0.0.1:PORT", reads the worker's endpoint
       from stdin)

Prints the worker's reply (or ack) as one JSON line. The key is computed
here, before the first send, exactly as billing.Key does in Go.
"""
import hashlib
import json
import sys

import zmq

TIMEOUT_MS = 20000


def content_key(namespace, *fields):
    h = hashlib.sha256()
    for s in (namespace,) + fields:
        b = s.encode("utf-8")
        h.update(len(b).to_bytes(8, "big") + b)
    return "kb_" + namespace + "_" + h.hexdigest()


def envelope(namespace, customer):
    event = {"customer_id": customer, "billing_period": "2026-11", "amount": 4200,
             "currency": "usd", "source": "tok_visa"}
    key = content_key(namespace, event["customer_id"], event["billing_period"])
    return json.dumps({"key": key, "event": event}).encode()


def recv(sock):
    if not sock.poll(TIMEOUT_MS):
        sys.exit("no reply within %d ms" % TIMEOUT_MS)
    return sock.recv_multipart()[-1]


def main():
    ctx = zmq.Context()
    pattern = sys.argv[1]
    if pattern == "req":
        endpoint, namespace, customer = sys.argv[2:5]
        s = ctx.socket(zmq.REQ)
        s.connect(endpoint)
        s.send(envelope(namespace, customer))
    elif pattern == "dealer":
        endpoint, namespace, customer = sys.argv[2:5]
        s = ctx.socket(zmq.DEALER)
        s.connect(endpoint)
        s.send_multipart([b"", envelope(namespace, customer)])
    elif pattern == "push":
        namespace, customer = sys.argv[2:4]
        s = ctx.socket(zmq.PULL)
        port = s.bind_to_random_port("tcp://127.0.0.1")
        print("ack tcp://127.0.0.1:%d" % port, flush=True)
        endpoint = sys.stdin.readline().strip()
        push = ctx.socket(zmq.PUSH)
        push.connect(endpoint)
        push.send(envelope(namespace, customer))
    else:
        sys.exit("unknown pattern " + pattern)
    print(recv(s).decode(), flush=True)
    s.setsockopt(zmq.LINGER, 0)
    ctx.destroy(linger=0)


if __name__ == "__main__":
    main()
