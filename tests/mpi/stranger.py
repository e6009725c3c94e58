#!/usr/bin/env python3
"""A stranger on the network of a running `primus launch` job (tests/mpi/stranger_test.sh).

Usage: stranger.py DIR STORE_PORT TOKEN
DIR holds pid.0 / pid.1 written by the ranks' wrapper; rank 1 stopped itself (SIGSTOP) before starting, so
rank 0 sits in the tcp mesh setup with its data-plane port open. The stranger finds that port, attacks it and
the store (garbage, the 13-byte messages that used to crash rank 0, truncated frames, huge lengths, a wrong
token with a well-formed HMAC handshake, 100 idle connections each), checks that every attack connection is
closed by the job, resumes rank 1, and keeps sending garbage to the store until the job ends. TOKEN is the
job's real token: it is used once, on the store only, to show that this script's handshake is the real one
(so that the wrong-token refusal means something).
"""
import hashlib
import hmac
import os
import signal
import socket
import struct
import sys
import time

work, store_port, token = sys.argv[1], int(sys.argv[2]), sys.argv[3].encode()


def log(msg):
    print(f"stranger: {msg}", flush=True)


def wait_for(path, seconds):
    end = time.time() + seconds
    while time.time() < end:
        if os.path.exists(path) and open(path).read().strip():
            return open(path).read().strip()
        time.sleep(0.05)
    sys.exit(f"stranger: {path} did not appear within {seconds} s")


def listening_ports(pid):
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    ports = set()
    for line in open("/proc/net/tcp").read().splitlines()[1:]:
        f = line.split()
        if f[3] == "0A" and f[9] in inodes:
            ports.add(int(f[1].split(":")[1], 16))
    return ports


def dial(port):
    return socket.create_connection(("127.0.0.1", port), timeout=10)


def closed_by_peer(s, seconds=10):
    s.settimeout(seconds)
    try:
        while True:
            if not s.recv(4096):
                return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def mac(key, role, label, nonce_s, nonce_c, claim, server_claim):
    m = role + struct.pack("<Q", len(label)) + label + nonce_s + nonce_c + struct.pack("<QQ", claim, server_claim)
    return hmac.new(key, m, hashlib.sha256).digest()


def handshake(port, key, label, claim, server_claim):
    """Plays the client side of comm/job_auth.h; returns (socket, True when the server proved the token)."""
    s = dial(port)
    challenge = b""
    while len(challenge) < 36:
        chunk = s.recv(36 - len(challenge))
        if not chunk:
            return s, False
        challenge += chunk
    assert challenge[:4] == b"PRA1", challenge[:4]
    nonce_c = os.urandom(32)
    s.sendall(nonce_c + struct.pack("<Q", claim) + mac(key, b"client", label, challenge[4:], nonce_c, claim,
                                                       server_claim))
    s.settimeout(10)
    proof = b""
    try:
        while len(proof) < 32:
            chunk = s.recv(32 - len(proof))
            if not chunk:
                break
            proof += chunk
    except (ConnectionResetError, socket.timeout):
        pass
    good = len(proof) == 32 and hmac.compare_digest(
        proof, mac(key, b"server", label, challenge[4:], nonce_c, claim, server_claim))
    return s, good


def attack(port, label, server_claim):
    """Every attack that must end with the job closing the connection; returns the idle ones."""
    attacks = {
        "garbage": os.urandom(4096),
        "old crash message x8": b"\x01\xfb\xff\xff\xff" + b"\0" * 8,
        "huge key length": b"\x01\xff\xff\xff\xff",
        "huge value length": b"\x01\x01\x00\x00\x00k" + b"\xff" * 8,
        "truncated handshake": os.urandom(40),
        "old 4-byte rank hello": struct.pack("<i", 1),
    }
    # All at once, then wait: the short ones are dropped at the handshake deadline (PRIMUS_AUTH_TIMEOUT_S).
    open_ = []
    for name, payload in attacks.items():
        s = dial(port)
        for _ in range(8 if "x8" in name else 1):
            try:
                s.sendall(payload)
            except (BrokenPipeError, ConnectionResetError):
                break
        if name == "truncated handshake":
            s.shutdown(socket.SHUT_WR)  # half-open: the job must not wait for the rest
        open_.append((name, s))
    for name, s in open_:
        if not closed_by_peer(s, 60):
            sys.exit(f"stranger: port {port}: the job kept the '{name}' connection open")
        s.close()
        log(f"port {port}: '{name}' refused")
    s, proved = handshake(port, b"wrong-token-" + os.urandom(16).hex().encode(), label, 1, server_claim)
    if proved or not closed_by_peer(s, 10):
        sys.exit(f"stranger: port {port}: a wrong token was not refused")
    s.close()
    log(f"port {port}: wrong token refused")
    idle = [dial(port) for _ in range(100)]
    log(f"port {port}: holding 100 idle connections")
    return idle


pid0 = wait_for(f"{work}/pid.0", 120)
pid1 = wait_for(f"{work}/pid.1", 120)
# Rank 0 listens on the store port and, once in the mesh setup, on its data-plane port.
deadline = time.time() + 120
mesh = set()
while time.time() < deadline and not mesh:
    mesh = listening_ports(pid0) - {store_port}
    time.sleep(0.05)
if not mesh:
    sys.exit("stranger: rank 0 never opened its data-plane port")
mesh_port = mesh.pop()
log(f"rank 0 listens on store port {store_port} and data-plane port {mesh_port}")

s, proved = handshake(store_port, token, b"primus-store", 0, 0)
if not proved:
    sys.exit("stranger: the control handshake with the real token failed: this script's protocol is wrong")
s.close()
log("control: the real token's handshake is accepted by the store (and closed unused)")

idle = attack(store_port, b"primus-store", 0)
idle += attack(mesh_port, b"primus-mesh/tcp/world", 0)
log("resuming rank 1")
os.kill(int(pid1), signal.SIGCONT)
# Until the job ends: garbage to the store every 0.2 s, and the idle connections stay open.
sent = 0
while True:
    try:
        os.kill(int(pid0), 0)
    except ProcessLookupError:
        break
    try:
        g = dial(store_port)
        g.sendall(os.urandom(100))
        g.close()
        sent += 1
    except OSError:
        pass
    time.sleep(0.2)
log(f"sent garbage to the store {sent} times during training; done")
