#!/bin/bash
# llm-infer --listen: clients of a Unix-domain or TCP socket get, each on its own
# connection, the responses stdin --jsonl gives for the same requests; bad lines, a
# client that leaves, one that waits for each answer, too many clients and bad addresses;
# SIGTERM ends the server (exit 0, socket file removed).
. "$(dirname "$0")/lib.sh"
PY=python3
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
if ! have_data tinyshakespeare/input.txt; then skip "llm-infer --listen" "no $DATA/tinyshakespeare"; echo "1..$_n"; exit 0; fi
cd "$TMP" || exit 1
tiny_data 300000
tiny_model 20

# start_server LOG ARGS...: runs llm-infer "$M" --listen ARGS in the background (SP) and
# waits for its "listening on ADDR" line (ADDR)
start_server() {
  local log=$1; shift
  llm-infer "$M" --listen "$@" 2>"$log" & SP=$!
  ADDR=
  for _ in $(seq 200); do
    ADDR=$(sed -n 's/^llm-infer: listening on //p' "$log")
    [ -n "$ADDR" ] && return 0
    kill -0 $SP 2>/dev/null || return 1
    sleep 0.05
  done
  return 1
}
# client_is SECS "MODE [ARGS]" WANT DESC: the client in MODE (at most SECS) prints exactly WANT
client_is() {
  local out
  out=$(timeout "$1" $PY client.py "$ADDR" $2 2>&1)
  check "$4 ($out)" [ "$out" = "$3" ]
}
# stop_server: SIGTERM, then its exit status in SRC (killed after 10 s: 999)
stop_server() {
  kill -TERM $SP
  for _ in $(seq 100); do kill -0 $SP 2>/dev/null || break; sleep 0.1; done
  kill -0 $SP 2>/dev/null && kill -KILL $SP
  wait $SP; SRC=$?
}

# the client: python3 client.py ADDR MODE [ARGS]; prints what the mode checks
cat >client.py <<'PY'
import json, socket, sys, threading, time

def connect(addr):
    if addr.startswith("unix:"):
        s = socket.socket(socket.AF_UNIX)
        s.connect(addr[5:])
    else:
        host, port = addr.rsplit(":", 1)
        s = socket.create_connection((host.strip("[]"), int(port)))
    s.settimeout(60)
    return s

def req(k, i, n=6):
    return {"id": "c%d-%d" % (k, i), "prompt": "ROMEO%d:" % i, "max_tokens": n, "seed": 100 + i,
            "temperature": 0.9}

def ticks(pid):                   # the server's CPU time, 1/100 s
    f = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
    return int(f[11]) + int(f[12])

def cap_memory(pid, mib):         # the server may map mib MiB more than it has (RLIMIT_AS)
    import resource
    vm = [int(l.split()[1]) for l in open("/proc/%d/status" % pid) if l.startswith("VmSize:")][0]
    resource.prlimit(pid, resource.RLIMIT_AS, ((vm << 10) + (mib << 20), resource.RLIM_INFINITY))

def after_close(pid, secs):       # the server's CPU over secs, then a new client's answer
    t0 = ticks(pid)
    time.sleep(secs)
    print("ticks", ticks(pid) - t0)
    f = connect(addr).makefile("rw")
    f.write(json.dumps(req(6, 1, 2)) + "\n")
    f.flush()
    print(json.loads(f.readline())["finish_reason"])

def ask(addr, r):                 # one request on a new connection: its finish reason, or
    try:                          # "closed" when the server closes the connection instead
        f = connect(addr).makefile("rw")
        f.write(json.dumps(r) + "\n")
        f.flush()
        line = f.readline()
        return json.loads(line)["finish_reason"] if line else "closed"
    except (BrokenPipeError, ConnectionResetError):
        return "closed"

def batch_client(addr, k, out):
    s = connect(addr)
    f = s.makefile("rw")
    for i in range(4):
        f.write(json.dumps(req(k, i)) + "\n")
    f.flush()
    s.shutdown(socket.SHUT_WR)
    out[k] = [json.loads(line) for line in f]

addr, mode = sys.argv[1], sys.argv[2]
if mode == "concurrent":          # 3 clients at once, 4 requests each
    out = {}
    ts = [threading.Thread(target=batch_client, args=(addr, k, out)) for k in range(3)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    for k in range(3):
        for r in sorted(out.get(k, []), key=lambda r: r["id"]):
            print(r["id"], r["finish_reason"], " ".join(map(str, r["tokens"])))
elif mode == "requests":          # what the concurrent clients send, for stdin --jsonl
    for k in range(3):
        for i in range(4):
            print(json.dumps(req(k, i)))
elif mode in ("interactive", "blank"):   # send one, wait for its answer, send the next
    s = connect(addr)
    f = s.makefile("rw")
    t0 = time.time()
    for i in range(3):
        f.write(json.dumps(req(9, i, 3)) + ("\n\n" if mode == "blank" else "\n"))
        f.flush()
        r = json.loads(f.readline())
        print(r["id"], r["finish_reason"])
    print("seconds %.1f" % (time.time() - t0))
elif mode == "bad":               # garbage, an over-long line, then a good request
    s = connect(addr)
    s.sendall(b"not json\n")
    s.sendall(b'{"prompt": "' + b"x" * (17 << 20) + b'"}\n')
    s.sendall((json.dumps(req(7, 0, 2)) + "\n").encode())
    s.shutdown(socket.SHUT_WR)
    for line in s.makefile("r"):
        r = json.loads(line)
        print(r["finish_reason"], r.get("error", "-"))
elif mode == "around":            # 1000 requests, a 17 MiB line, one more: all in one send
    s = connect(addr)
    s.sendall(b"".join((json.dumps(req(3, i, 3)) + "\n").encode() for i in range(1000)) +
              b'{"prompt": "' + b"x" * (17 << 20) + b'"}\n' + (json.dumps(req(4, 0, 3)) + "\n").encode())
    s.shutdown(socket.SHUT_WR)
    got = [json.loads(line) for line in s.makefile("r")]
    print(len(got), sum(r["finish_reason"] == "error" for r in got))
elif mode == "justover":          # a line 100 bytes over 16 MiB, its end in one send
    s = connect(addr)
    s.sendall(b'{"prompt": "' + b"x" * ((16 << 20) + 100 - 14) + b'"}\n')
    s.shutdown(socket.SHUT_WR)
    print(" ".join(json.loads(line).get("error", "-") for line in s.makefile("r")))
elif mode == "unread":            # many requests, read only after SIGTERM to the server
    import os, signal
    s = connect(addr)
    s.sendall(b"".join((json.dumps(req(2, i, 20)) + "\n").encode() for i in range(3000)))
    time.sleep(3)
    os.kill(int(sys.argv[3]), signal.SIGTERM)
    print(len(s.makefile("rb").readlines()))
elif mode == "pipelined":         # 40000 lines of 1 KiB (2.5 times the unread limit) in one
    s = connect(addr)             # send, read meanwhile: each one answered once
    n = 40000                     # (a prompt over the context is an error; every 100th is good)
    data = b"".join((json.dumps({"id": i, "prompt": "ROMEO:" if i % 100 == 0 else "x" * 1000,
                                 "max_tokens": 2, "seed": 1}) + "\n").encode() for i in range(n))
    t = threading.Thread(target=lambda: (s.sendall(data), s.shutdown(socket.SHUT_WR)))
    t.start()
    got = [json.loads(line) for line in s.makefile("r")]
    t.join()
    print(len(got), len(set(r["id"] for r in got)), sum(r["finish_reason"] == "length" for r in got))
elif mode == "slowread":          # 20000 requests in one send, responses read slowly in
    s = connect(addr)             # small pieces: a backlog waits at the server, sent in part
    n = 20000                     # each time (6 MB in all: under the unread limit)
    data = b"".join((json.dumps({"id": i, "prompt": "ROMEO:" if i % 100 == 0 else "x" * 80,
                                 "max_tokens": 2, "seed": 1}) + "\n").encode() for i in range(n))
    t = threading.Thread(target=lambda: (s.sendall(data), s.shutdown(socket.SHUT_WR)))
    t.start()
    buf = bytearray()
    while True:
        b = s.recv(4096)
        if not b:
            break
        buf += b
        time.sleep(0.0005)
    t.join()
    got = [json.loads(line) for line in buf.decode().splitlines()]
    print(len(got), sorted(r["id"] for r in got) == list(range(n)),
          sum(r["finish_reason"] == "length" for r in got))
elif mode == "outnomem":          # memory capped, responses left unread: that client is
                                  # closed when its buffer cannot grow, the server goes on
    pid = int(sys.argv[3])
    cap_memory(pid, 12)
    s = connect(addr)
    s.settimeout(30)
    line = (json.dumps({"prompt": "x" * 80, "max_tokens": 2}) + "\n").encode()
    try:                          # in pieces, so that its input takes little memory
        for _ in range(120):      # 120000 responses of 300 bytes: more than 16 MiB
            s.sendall(line * 1000)
            time.sleep(0.01)
    except (BrokenPipeError, ConnectionResetError):
        pass
    try:
        while s.recv(1 << 16):
            pass
        print("closed")
    except socket.timeout:
        print("open")
    except ConnectionResetError:
        print("closed")
    after_close(pid, 1)
elif mode == "trickle":           # 200 requests, CRLF and blank lines, in random pieces
    import random
    random.seed(5)
    s = connect(addr)
    data = b"".join((json.dumps(req(1, i, 1)) + ("\r\n" if i % 3 else "\n\n")).encode()
                    for i in range(200))
    def send():
        at = 0
        while at < len(data):
            k = random.choice((1, 7, 100, 900, 5000))
            s.sendall(data[at:at + k])
            at += k
            if random.random() < 0.05:
                time.sleep(0.01)
        s.shutdown(socket.SHUT_WR)
    t = threading.Thread(target=send)
    t.start()
    got = [json.loads(line) for line in s.makefile("r")]
    t.join()
    print(len(got), sorted(r["id"] for r in got) == sorted("c1-%d" % i for i in range(200)),
          sum(r["finish_reason"] == "length" for r in got))
elif mode == "nomem":             # memory capped (RLIMIT_AS) below what a 17 MiB line needs
                                  # to be read: that client is closed, not polled in a loop
    pid = int(sys.argv[3])
    cap_memory(pid, 28)
    s = connect(addr)
    s.settimeout(10)
    try:
        s.sendall(b'{"prompt": "' + b"x" * (17 << 20) + b'"}\n')
        r = s.recv(100)
        print("closed" if r == b"" else "data")
    except socket.timeout:
        print("open")
    except (BrokenPipeError, ConnectionResetError):
        print("closed")
    after_close(pid, 2)
elif mode == "hold":              # N clients held open for 2 s
    held = [connect(addr) for _ in range(int(sys.argv[3]))]
    time.sleep(2)
elif mode == "leave":             # a client that leaves before its answer
    s = connect(addr)
    s.sendall((json.dumps(req(5, 0, 40)) + "\n").encode())
    s.close()
    time.sleep(0.2)
    s = connect(addr)
    f = s.makefile("rw")
    f.write(json.dumps(req(6, 0, 2)) + "\n")
    f.flush()
    print(json.loads(f.readline())["finish_reason"])
elif mode == "crowd":             # 64 idle clients: a 65th takes the idlest one's place
    held = []
    for _ in range(64):
        held.append(connect(addr))
        time.sleep(0.01)
    time.sleep(0.3)
    s = connect(addr)
    f = s.makefile("rw")
    f.write(json.dumps(req(8, 0, 1)) + "\n")
    f.flush()
    print("65th:", json.loads(f.readline())["finish_reason"])
    held[0].settimeout(5)
    try:
        print("1st:", "closed" if held[0].recv(100) == b"" else "data")
    except ConnectionResetError:
        print("1st: closed")
    f = held[1].makefile("rw")
    f.write(json.dumps(req(8, 1, 1)) + "\n")
    f.flush()
    print("2nd:", json.loads(f.readline())["finish_reason"])
elif mode == "stalled":           # 64 clients each holding a partial line, silent (a
                                  # slowloris): a 65th is served in place of the one silent
                                  # longest, which keeps the answer it already had
    a = connect(addr)             # the 1st: one request answered (unread), then a partial line
    a.sendall((json.dumps(req(10, 0, 2)) + "\n").encode())
    while True:
        b = a.recv(1 << 16, socket.MSG_PEEK)
        if not b or b"\n" in b:
            break
        time.sleep(0.01)
    a.sendall(b'{"id": "a1", "prompt": "ROM')
    held = [a]
    for _ in range(63):
        s = connect(addr)
        s.sendall(b'{"id": "stall", "prompt": "ROMEO')
        held.append(s)
        time.sleep(0.01)
    time.sleep(0.3)
    r = ask(addr, req(8, 0, 1))
    print("65th:", r)
    if r == "closed":
        sys.exit(0)
    got = a.makefile("r").readlines()   # what it had, then the end
    print("1st:", len(got), "answer(s)", json.loads(got[0])["id"] if got else "-", "then closed")
    held[1].sendall(b'1:", "max_tokens": 1, "seed": 3}\n')
    line = held[1].makefile("r").readline()
    print("2nd:", "%(id)s %(finish_reason)s" % json.loads(line) if line else "closed")
elif mode == "inflight":          # 64 clients with requests in flight (8 each) and a 65th, all
    import os, signal             # queued while the server is stopped: accepted at once, their
    pid = int(sys.argv[3])        # requests not yet read; none of the 64 is replaced by the 65th
    os.kill(pid, signal.SIGSTOP)
    try:
        held = []
        for k in range(64):
            s = connect(addr)
            s.sendall("".join(json.dumps(req(k, i, 40)) + "\n" for i in range(8)).encode())
            held.append(s)
        n = connect(addr)
        n.sendall((json.dumps(req(99, 0, 1)) + "\n").encode())
    finally:
        os.kill(pid, signal.SIGCONT)
    try:                          # the server closes it: no room
        line = n.makefile("r").readline()
        new = json.loads(line)["finish_reason"] if line else "closed"
    except ConnectionResetError:
        new = "closed"
    ok = 0
    for k, s in enumerate(held):
        try:
            f = s.makefile("r")
            ids = sorted(json.loads(f.readline())["id"] for _ in range(8))
            ok += ids == ["c%d-%d" % (k, i) for i in range(8)]
        except (ConnectionResetError, ValueError):
            pass
    print("answered:", ok, "of 64")
    print("65th:", new)
elif mode == "quiet":             # a silent client, one on a partial line and one whose
    a, b, c = connect(addr), connect(addr), connect(addr)   # request was answered (and read):
    b.sendall(b'{"prompt": "ROM')                           # each closed within SECS, or open
    f = c.makefile("rw")                                    # after
    f.write(json.dumps(req(12, 0, 1)) + "\n")
    f.flush()
    json.loads(f.readline())
    for name, s in (("silent", a), ("partial", b), ("answered", c)):
        s.settimeout(float(sys.argv[3]))
        try:
            print(name, "closed" if s.recv(100) == b"" else "data")
        except socket.timeout:
            print(name, "open")
        except ConnectionResetError:
            print(name, "closed")
elif mode == "unreading":         # 64 clients that send 3000 bad lines and read none of
    held = []                     # the responses (more than their sockets take): a new
    for _ in range(64):           # client is served once they are closed
        s = socket.socket(socket.AF_UNIX)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(addr[5:])
        s.sendall(b"x\n" * 3000)
        held.append(s)
    t0 = time.time()
    r = "closed"
    while r == "closed" and time.time() < t0 + 60:
        time.sleep(0.2)
        r = ask(addr, req(8, 0, 1))
    print("new:", r)
elif mode == "manylong":          # 17 clients each stopped in a line of nearly 16 MiB (272
    big = bytearray(b"x" * (16 << 20))   # MiB in all): past 256 MiB the longest line (the
    held = []                            # 1st's) is cut, answered at once; the others' lines
    for k in range(17):                  # are kept whole, and answered when finished
        s = connect(addr)
        s.settimeout(30)
        s.sendall(b'{"id": "long%d", "prompt": "' % k)
        s.sendall(memoryview(big)[:(16 << 20) - (200 if k == 0 else 1000)])
        held.append(s)
    def reply(s):
        try:
            line = s.makefile("r").readline()
            return json.loads(line).get("error", "-") if line else "closed"
        except socket.timeout:
            return "none"
    print("1st:", reply(held[0]))
    for s in held[1:]:
        s.sendall(b'"}\n')
    got = [reply(s) for s in held[1:]]
    print("others:", sum("exceeds the context" in r for r in got), "of 16 answered as too long a prompt")
elif mode == "shrink":            # 64 clients, one after the other, each sends a line of
    pid = int(sys.argv[3])        # nearly 16 MiB (not JSON), then part of another, and stays:
    def rss():                    # once its line is answered, what its buffer grew to is
        return [int(l.split()[1]) for l in open("/proc/%d/status" % pid)   # given back
                if l.startswith("VmRSS:")][0] >> 10
    before = rss()
    big = b"x" * ((16 << 20) - 1000) + b"\n"
    held = []
    for k in range(64):
        s = connect(addr)
        s.sendall(big + b'{"id": "next%d", "prompt": "ROM' % k)
        line = s.makefile("r").readline()
        held.append(s)
        if not line or json.loads(line)["finish_reason"] != "error":
            print("no error response")
            break
    print("MiB held:", rss() - before)
elif mode == "paused":            # a request sent while the server is stopped for longer than
    import os, signal             # its idle timeout is still answered
    pid = int(sys.argv[3])
    f = connect(addr).makefile("rw")
    f.write(json.dumps(req(11, 0, 1)) + "\n")
    f.flush()
    print(json.loads(f.readline())["id"])
    os.kill(pid, signal.SIGSTOP)
    try:
        f.write(json.dumps(req(11, 1, 1)) + "\n")
        f.flush()
        time.sleep(2.5)
    finally:
        os.kill(pid, signal.SIGCONT)
    line = f.readline()
    print(json.loads(line)["id"] if line else "closed")
PY

# ---- a Unix-domain socket ----
if start_server srv.log unix:"$TMP/s.sock" --batch 4; then
  ok "listening on $ADDR"
  $PY client.py "$ADDR" requests >reqs.jsonl
  llm-infer "$M" --jsonl --batch 1 <reqs.jsonl 2>/dev/null |
    $PY -c 'import json, sys; [print(r["id"], r["finish_reason"], " ".join(map(str, r["tokens"]))) for r in sorted(map(json.loads, sys.stdin), key=lambda r: r["id"])]' >want.txt
  $PY client.py "$ADDR" concurrent >got.txt 2>client.err
  check "3 clients at once: each gets its 4 responses, equal to stdin --jsonl's" \
    sh -c "[ \$(wc -l <got.txt) = 12 ] && cmp -s got.txt want.txt"
  for mode in "interactive:a client that waits for each answer gets them (--batch 4)" \
              "blank:... also with a blank line after each request"; do
    out=$(timeout 30 $PY client.py "$ADDR" "${mode%%:*}" 2>&1)
    check "${mode#*:}: $(echo $out | tr '\n' ' ')" sh -c "[ \"\$(echo '$out' | grep -c ' length')\" = 3 ]"
  done
  out=$(timeout 60 $PY client.py "$ADDR" bad 2>&1)
  check "garbage and a 17 MiB line: error responses, then the next request answered" \
    sh -c "echo '$out' | sed -n 1p | grep -q '^error' && echo '$out' | sed -n 2p | grep -q 'longer than 16 MiB' && [ \"\$(echo '$out' | sed -n 3p)\" = 'length -' ]"
  client_is 60 around "1002 1" "1000 requests before a 17 MiB line and one after, sent at once: 1002 responses, 1 error"
  client_is 120 pipelined "40000 40000 400" "40000 lines of 1 KiB pipelined in one send (42 MB): each answered once, 400 good"
  client_is 120 slowread "20000 True 200" "20000 requests in one send, responses read slowly in 4 KiB pieces: each answered once"
  client_is 60 trickle "200 True 200" "200 requests in pieces of 1 to 5000 bytes, CRLF and blank lines: each answered"
  client_is 60 justover "input line longer than 16 MiB" "a line 100 bytes over 16 MiB: refused as on stdin"
  client_is 60 leave "length" "a client that left: the next one is served"
  out=$(timeout 60 $PY client.py "$ADDR" crowd 2>&1)
  check "64 idle clients: a 65th is served in place of the idlest, the others stay ($(echo $out | tr '\n' ' '))" \
    sh -c "echo '$out' | grep -q '65th: length' && echo '$out' | grep -q '1st: closed' && echo '$out' | grep -q '2nd: length'"
  out=$(timeout 60 $PY client.py "$ADDR" stalled 2>&1)
  check "64 clients silent on a partial line: a 65th is served in place of the one silent longest, which keeps its answer, the others stay ($(echo $out | tr '\n' ' '))" \
    sh -c "echo '$out' | grep -q '^65th: length' && echo '$out' | grep -q '^1st: 1 answer(s) c10-0 then closed' && echo '$out' | grep -q '^2nd: stall length'"
  expect_exit "a second server on the same socket: 74 (a server is listening there)" 74 \
    timeout 10 llm-infer "$M" --listen unix:"$TMP/s.sock"
  client_is 60 leave "length" "... the first one still served"
  check "still running after all that" kill -0 $SP
  stop_server
  check "SIGTERM: exit 0 ($SRC), 'stopped' said, the socket file removed" \
    sh -c "[ $SRC = 0 ] && grep -q 'stopped after' srv.log && [ ! -e '$TMP/s.sock' ]"
else
  notok "the server did not start: $(head -c 300 srv.log)"
fi

# with_server LOG SOCK BODY ARGS...: BODY (a function) against llm-infer --listen
# unix:$TMP/SOCK ARGS, a server of its own (no clients left from other tests), then
# SIGTERM: exit 0
with_server() {
  local log=$1 sock=$2 body=$3
  shift 3
  if start_server "$log" unix:"$TMP/$sock" "$@"; then
    $body
    stop_server
    check "SIGTERM: exit 0 ($SRC)" [ "$SRC" = 0 ]
  else
    notok "the server did not start: $(head -c 300 "$log")"
  fi
}

# ---- 64 clients with requests in flight ----
in_flight() {
  out=$(timeout 120 $PY client.py "$ADDR" inflight $SP 2>&1)
  check "64 clients with requests in flight not yet read, a 65th: none replaced, each gets its 8 answers, the 65th closed ($(echo $out | tr '\n' ' '))" \
    sh -c "echo '$out' | grep -q '^answered: 64 of 64' && echo '$out' | grep -q '^65th: closed'"
  client_is 60 leave "length" "... the next client is served"
}
with_server srv7.log s7.sock in_flight --batch 4

# ---- --idle-timeout ----
idle_1() {
  client_is 60 "quiet 5" "silent open
partial closed
answered open" "--idle-timeout 1: a client stopped on a partial line is closed; a silent one, and one whose request was answered, stay"
  client_is 90 unreading "new: length" "... 64 clients that read none of their responses are closed: a new one is served"
  client_is 60 "paused $SP" "c11-0
c11-1" "... a request sent while the server was stopped for 2.5 s is answered, not timed out"
  client_is 60 leave "length" "... the next client is served"
}
with_server srv8.log s8.sock idle_1 --idle-timeout 1
idle_0() {
  client_is 60 "quiet 3" "silent open
partial open
answered open" "--idle-timeout 0: quiet clients stay"
}
with_server srv9.log s9.sock idle_0 --idle-timeout 0

# ---- the unfinished lines of all clients are bounded (256 MiB) ----
many_long() {
  timeout 180 $PY client.py "$ADDR" manylong >manylong.out 2>&1
  check "17 clients stopped in lines of ~16 MiB: past 256 MiB in all, the longest is cut and answered, the others kept ($(tr '\n' ' ' <manylong.out))" \
    sh -c "grep -q '^1st: input line cut: the unfinished lines of all clients passed the server.s 256 MiB' manylong.out && grep -q '^others: 16 of 16' manylong.out"
  client_is 60 leave "length" "... the next client is served"
}
with_server srv10.log s10.sock many_long

# ---- a buffer grown for a long line is given back once the line is taken ----
shrink() {
  out=$(timeout 300 $PY client.py "$ADDR" shrink $SP 2>&1)
  held=$(echo "$out" | sed -n 's/^MiB held: //p')
  check "64 clients that each sent a ~16 MiB line and part of the next: the server's memory grew by $held MiB (< 256; 1 GiB when each kept its buffer) ($out)" \
    sh -c "[ -n '$held' ] && [ '$held' -lt 256 ]"
  client_is 60 leave "length" "... the next client is served"
}
with_server srv11.log s11.sock shrink

# ---- a file put at the socket's path meanwhile is not the server's to remove ----
if start_server srv2.log unix:"$TMP/s2.sock"; then
  rm "$TMP/s2.sock" && echo keep >"$TMP/s2.sock"
  stop_server
  check "SIGTERM: exit 0 ($SRC), the file now at the socket's path kept" \
    sh -c "[ $SRC = 0 ] && [ \"\$(cat '$TMP/s2.sock')\" = keep ]"
else
  notok "the server did not start: $(head -c 300 srv2.log)"
fi

# ---- responses not yet read when the server stops are still sent ----
if start_server srv3.log unix:"$TMP/s3.sock" --batch 8; then
  out=$(timeout 60 $PY client.py "$ADDR" unread $SP 2>&1)   # the client sends the SIGTERM
  for _ in $(seq 100); do kill -0 $SP 2>/dev/null || break; sleep 0.1; done
  kill -0 $SP 2>/dev/null && kill -KILL $SP
  wait $SP; SRC=$?
  n=$(sed -n 's/.*stopped after \([0-9]*\) request.*/\1/p' srv3.log)
  check "SIGTERM: exit 0 ($SRC), a client reading late gets all $n responses ($out)" \
    sh -c "[ $SRC = 0 ] && [ -n '$n' ] && [ '$out' = '$n' ]"
else
  notok "the server did not start: $(head -c 300 srv3.log)"
fi

# ---- out of memory: the client whose bytes (a 17 MiB line) or responses (unread) find
# none is closed, the server neither spins nor stops, the next client is served ----
# nomem_check NAME LOG SOCK MODE TIMEOUT SECONDS
nomem_check() {
  if [ -n "${LLM_SAN:-}" ]; then
    skip "$1: that client closed" "RLIMIT_AS under sanitizers"
  elif start_server "$2" unix:"$TMP/$3"; then
    timeout 60 $PY client.py "$ADDR" leave >/dev/null 2>&1   # the threads and arenas made
    out=$(timeout "$5" $PY client.py "$ADDR" "$4" $SP 2>&1)
    t=$(echo "$out" | sed -n 's/^ticks //p')
    check "$1: that client closed, $t ticks of CPU in $6 s (< 50), the next served ($(echo $out | tr '\n' ' '))" \
      sh -c "[ \"\$(echo '$out' | sed -n 1p)\" = closed ] && [ -n '$t' ] && [ '$t' -lt 50 ] && [ \"\$(echo '$out' | sed -n 3p)\" = length ]"
    stop_server
    check "... SIGTERM: exit 0 ($SRC)" [ "$SRC" = 0 ]
  else
    notok "the server did not start: $(head -c 300 "$2")"
  fi
}
nomem_check "memory capped, a 17 MiB line" srv5.log s5.sock nomem 60 2
nomem_check "memory capped, responses unread" srv6.log s6.sock outnomem 90 1

# ---- out of descriptors: the clients wait in the queue, no busy loop ----
(ulimit -n 16; start_server srv4.log unix:"$TMP/s4.sock"; echo $SP >srv4.pid; wait $SP) &
for _ in $(seq 100); do [ -s srv4.pid ] && grep -q listening srv4.log && break; sleep 0.05; done
SP=$(cat srv4.pid 2>/dev/null)
if [ -n "$SP" ]; then
  t0=$(awk '{print $14 + $15}' /proc/$SP/stat)
  timeout 20 $PY client.py unix:"$TMP/s4.sock" hold 20 >/dev/null 2>&1
  t1=$(awk '{print $14 + $15}' /proc/$SP/stat)
  kill -TERM $SP; wait
  check "20 clients with 16 descriptors: $((t1 - t0)) ticks of CPU in 2 s (< 50)" [ $((t1 - t0)) -lt 50 ]
else
  notok "the server did not start: $(head -c 300 srv4.log)"
fi

# ---- TCP, any free port ----
if start_server tcp.log 127.0.0.1:0; then
  case $ADDR in 127.0.0.1:[1-9]*) ok "TCP port 0: the bound port is said ($ADDR)";; *) notok "TCP address said: '$ADDR'";; esac
  client_is 60 leave "length" "a TCP client is served"
  expect_exit "the same port again: 74" 74 llm-infer "$M" --listen "$ADDR"
  stop_server
  check "SIGTERM: exit 0 ($SRC)" [ "$SRC" = 0 ]
else
  notok "the TCP server did not start: $(head -c 300 tcp.log)"
fi

# ---- refused ----
expect_exit "--listen with -p: 64" 64 llm-infer "$M" --listen unix:x.sock -p hi
expect_exit "--listen nonsense: 64" 64 llm-infer "$M" --listen nonsense
expect_exit "--listen 127.0.0.1:65536 (port out of range): 64" 64 timeout 10 llm-infer "$M" --listen 127.0.0.1:65536
expect_exit "--listen unix: (no path): 64" 64 llm-infer "$M" --listen unix:
expect_exit "--idle-timeout -1: 64" 64 timeout 10 llm-infer "$M" --listen unix:x.sock --idle-timeout -1
expect_exit "--idle-timeout 86401: 64" 64 timeout 10 llm-infer "$M" --listen unix:x.sock --idle-timeout 86401
expect_exit "--idle-timeout without --listen: 64" 64 llm-infer "$M" -p hi --idle-timeout 5
echo keep >plain.txt
expect_exit "--listen on a regular file: 64" 64 llm-infer "$M" --listen unix:plain.txt
check "... the file untouched" [ "$(cat plain.txt)" = keep ]
echo "1..$_n"
