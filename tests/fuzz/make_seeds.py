#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora (corpus/<target>/), each seed a small valid input.

Run from anywhere: python3 tests/fuzz/make_seeds.py. Rewrites the seeds it makes and leaves
other files (reproducers of fixed findings) alone. Not a test: the targets' own comments say
how each reads its bytes."""
import json
import pathlib
import struct

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent


def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def seed(target, name, data):
    d = HERE / "corpus" / target
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(data.encode() if isinstance(data, str) else data)


# events_fuzz: event files as a simulation writes them (a config record, then a few of each kind
# the reader takes without a tree, one with an array), and a real node's resumed file.
_config = ('{"t":0,"node":-1,"type":"config","mode":"simulate","seed":1,"metrics":{"param_count":1,'
           '"flops_per_token":6,"tokens_per_inner_step":1,"gpus_per_node":1,"peak_flops_per_gpu":1,'
           '"H":5}}')
seed("events_fuzz", "simulation", "\n".join([
    _config,
    '{"t":0,"node":0,"type":"node_started","initial":true,"host":"us-east-0"}',
    '{"t":0.5,"node":0,"type":"epoch_formed","epoch":0,"outer_step":0,"members":[0,1]}',
    '{"t":22.9,"node":0,"type":"inner_steps","outer_step":0,"steps":5,"tokens":1048576,'
    '"start_s":0.01,"compute_s":22.96,"loss":null}',
    '{"t":30.0,"node":1,"type":"allreduce","outer_step":0,"bucket":0,"epoch":0,"attempt":0,'
    '"codec":"int8","elements":525336576,"participants":2,"bytes_sent":788030784,'
    '"bytes_received":788030784,"start_s":24.3,"elapsed_s":5.67,"relative_error":null}',
    '{"t":31,"node":0,"type":"outer_step","outer_step":0,"epoch":0,"participants":2,"inner_s":22.9,'
    '"allreduce_s":5.7,"outer_opt_s":0,"tokens":2097152,"loss":3.5,"exposed_s":0}',
    '{"t":40,"node":-1,"type":"run_finished","simulated_s":40,"outer_steps":1,'
    '"outer_steps_planned":1}']) + "\n")
seed("events_fuzz", "resumed", "\n".join([
    _config.replace('"simulate"', '"real"').replace('"seed":1', '"clock_origin_unix_s":1.7e9'),
    '{"t":5,"node":3,"type":"node_lost","exit":"lost","reason":"store gone","outer_steps":2}',
    _config.replace('"simulate"', '"real"'),
    '{"t":1,"node":3,"type":"run_resumed","life":2,"via":"checkpoint","from_outer_step":2}']) +
    "\n")
# data_ledger_fuzz: ledgers as DataLedger::encode writes them (a fresh one; one with positions
# owed and an overlapped run's planned step).
seed("data_ledger_fuzz", "fresh", "data-ledger 1\nper_node 8\nnext 0\nreturned\n")
seed("data_ledger_fuzz", "owed-and-planned",
     "data-ledger 1\nper_node 4\nnext 24\nreturned 4 8\nplanned 2 3 12 16\nplanned 2 5 20 24\n")
# round_record_fuzz: record texts as RoundRecord::encode writes them.
seed("round_record_fuzz", "commit", "round=3;epoch=2;outer_step=1;attempt=0;prev=1;members=1,2,3;"
     "joiners=3;sources=1,2;removed=;reason=")
seed("round_record_fuzz", "retry", "round=9;epoch=7;outer_step=4;attempt=2;prev=2;members=4,1;"
     "joiners=;sources=;removed=2,3;reason=peer 2 lost: timeout")

# churn_fuzz: hosts us-east-1, us-east-2 (running) and eu-west-1 (stopped).
seed("churn_fuzz", "time", "time_s,node,event,arg\n1.5,us-east-1,slow,0.5\n2,eu-west-1,join\n"
     "3,us-east-2,fail\n4,us-east-1,slow,1\n5,eu-west-1,leave\n")
seed("churn_fuzz", "step", "# a comment\nstep,node,event\n40,us-east-1,fail\n60,us-east-1,join\n")

# scenario_fuzz: the committed scenarios.
for name in ("intellect1-usa.yaml", "emulate-tiny.yaml"):
    seed("scenario_fuzz", name, (ROOT / "scenarios" / name).read_bytes())

# run_config_fuzz: byte 0 picks a run file (0), a model config (1) or a run file from text (2).
seed("run_config_fuzz", "run", b"\x00" + (ROOT / "cli/train/run.example.yaml").read_bytes())
seed("run_config_fuzz", "model", b"\x01" + (ROOT / "trainer/configs/tiny.yaml").read_bytes())
seed("run_config_fuzz", "trainer", "\x02model: {config: tiny, seq_len: 64}\n"
     "train: {batch: 4, lr: 3.0e-3, warmup_steps: 10}\ndiloco: {outer_lr: 0.7, outer_momentum: 0.9}\n")


# safetensors_fuzz: byte 0 = verify the checksum; then a file.
def safetensors(tensors, checksum):
    header, data = {}, b""
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    if checksum:
        header["__metadata__"] = {"meridian.crc32c": "%08x" % crc32c(data)}
    text = json.dumps(header, separators=(",", ":")).encode()
    return struct.pack("<Q", len(text)) + text + data


seed("safetensors_fuzz", "checked", b"\x01" + safetensors(
    [("w", "F32", [2, 2], struct.pack("<4f", 1, -2, 3.5, 0)), ("b", "BF16", [3], b"\x80\x3f" * 3)],
    True))
seed("safetensors_fuzz", "plain", b"\x00" + safetensors(
    [("step", "I64", [], struct.pack("<q", 7)), ("m", "U8", [0], b"")], False))

CODECS = {"fp32": 0, "bf16": 1, "int8": 2, "int8-minmax": 3, "fp4": 4}


def chunk(codec, count, payload, epoch=3, outer_step=9, bucket=1, index=2):
    head = struct.pack("<IHBBQQIIQQ", 0x4E44524D, 1, codec, 0, epoch, outer_step, bucket, index,
                       count, len(payload))
    return head + struct.pack("<II", crc32c(payload, crc32c(head)), 0) + payload


# wire_chunk_fuzz: byte 0 = codec | 0x80 (expect the header's own fields); then a message.
fp32 = struct.pack("<4f", 1, 2, -3, 0.5)
seed("wire_chunk_fuzz", "fp32", bytes([0x80]) + chunk(0, 4, fp32, 11, 5, 0, 7))
seed("wire_chunk_fuzz", "bf16-empty", bytes([0x81]) + chunk(1, 0, b""))
seed("wire_chunk_fuzz", "expected-id", bytes([0x00]) + chunk(0, 16, bytes(64)))

# codec_payload_fuzz: byte 0 = codec, bytes 1-2 = count; then the payload (sealed by the target).
seed("codec_payload_fuzz", "fp32", b"\x00" + struct.pack("<H", 4) + fp32)
seed("codec_payload_fuzz", "bf16", b"\x01" + struct.pack("<H", 3) + b"\x80\x3f\x00\x40\x40\xc0")
for name in ("int8", "int8-minmax"):
    pattern = bytes((i * 37) & 0xFF for i in range(1100))
    seed("codec_payload_fuzz", name, bytes([CODECS[name]]) + struct.pack("<H", 64) + pattern)
# fp4: 37 values = two blocks: fp32 scales 1 and 0.25, then 19 bytes of codes (last nibble 0).
seed("codec_payload_fuzz", "fp4", bytes([CODECS["fp4"]]) + struct.pack("<H", 37) +
     struct.pack("<2f", 1, 0.25) + bytes((i * 37) & 0xFF for i in range(18)) + b"\x05")


# store_frame_fuzz: byte 0 bit 0 = join first; then the byte stream the peer sends.
def frame(kind, *fields):
    body = bytes([kind])
    for f in fields:
        body += f
    return struct.pack(">I", len(body)) + body


def s(text):
    text = text.encode()
    return struct.pack(">I", len(text)) + text


u8 = lambda v: struct.pack(">B", v)
u32 = lambda v: struct.pack(">I", v)
i64 = lambda v: struct.pack(">q", v)
SET, GET, TRY_GET, WAIT, ADD, CAS, ERASE, LIST, READ_PREFIX = 16, 17, 18, 19, 20, 21, 22, 23, 24
LEASE_GRANT, KEEPALIVE, LEASE_REVOKE, CAS_LEASED, WATCH = 25, 26, 27, 28, 29
seed("store_frame_fuzz", "requests", b"\x01" + frame(SET, s("a/1"), s("x")) + frame(GET, s("a/1"), u32(100))
     + frame(TRY_GET, s("a/2")) + frame(ADD, s("n"), i64(5)) + frame(CAS, s("a/1"), u8(1), s("x"), s("y"))
     + frame(LIST, s("a/")) + frame(READ_PREFIX, s("a/")) + frame(WAIT, u32(1), s("a/1"), u32(100))
     + frame(ERASE, s("a/1")))
seed("store_frame_fuzz", "leases", b"\x01" + frame(LEASE_GRANT, u32(5000)) + frame(KEEPALIVE, i64(1))
     + frame(CAS_LEASED, s("m/1"), u8(0), s("alive"), i64(1)) + frame(WATCH, u32(1), s("m/"), i64(0), u32(50))
     + frame(LEASE_REVOKE, i64(1)))
seed("store_frame_fuzz", "join", b"\x00" + frame(2, s("node"), s("0.1.0"), s(""), bytes(32), bytes(32)))


# recovery_fuzz: flags, chunk size - 1, shared bytes, private bound/bytes; then messages
# (u8 peer index, u16 length, bytes). The script seals replies (flag 8) so no CRC is needed here.
def msg(data, peer=0):
    return struct.pack("<BH", peer, len(data)) + data


def reply(arg, payload):
    return struct.pack("<IIQQ", 0x4B43524D, 0, arg, len(payload)) + payload


layout = struct.pack("<IIQQQ", 0x594C524D, 0, 20, 5, 0)
private = 1 << 63
seed("recovery_fuzz", "joiner", bytes([8, 15, 20, 10]) + msg(layout) + msg(reply(private, b"p" * 5))
     + msg(reply(0, b"s" * 16)) + msg(reply(1, b"t" * 4)))
seed("recovery_fuzz", "joiner-two-sources", bytes([8 | 2, 15, 20, 10]) + msg(layout, 0) + msg(layout, 1)
     + msg(reply(private, b"p" * 5), 0) + msg(reply(0, b"s" * 16), 0) + msg(reply(1, b"t" * 4), 1))


def request(op, arg=0, chunk_bytes=16):
    return struct.pack("<IIQQ", 0x5152524D, op, arg, chunk_bytes)


seed("recovery_fuzz", "source", bytes([1, 15, 20, 5]) + msg(request(1)) + msg(request(2, private))
     + msg(request(2, 0)) + msg(request(2, 1)) + msg(request(3)))

# store_client_fuzz: byte 0 = the operation (Store method, see call()); then the reply stream.
OK, TIMEOUT, ERROR = 32, 33, 34
seed("store_client_fuzz", "set", b"\x00" + frame(OK))
seed("store_client_fuzz", "get", b"\x01" + frame(OK, s("value")))
seed("store_client_fuzz", "try-get", b"\x02" + frame(OK, u8(1), s("value")))
seed("store_client_fuzz", "wait-timeout", b"\x03" + frame(TIMEOUT, s("key(s) 'b' did not appear in time")))
seed("store_client_fuzz", "add-error", b"\x04" + frame(ERROR, s("add: key 'n' holds a value that is not an integer")))
seed("store_client_fuzz", "compare-set", b"\x05" + frame(OK, u8(1), s("v")))
seed("store_client_fuzz", "list", b"\x07" + frame(OK, u32(2), s("p/a"), s("p/b")))
seed("store_client_fuzz", "read-prefix", b"\x08" + frame(OK, u32(1), s("p/a"), s("1")))
seed("store_client_fuzz", "lease-grant", b"\x09" + frame(OK, i64(3)))
seed("store_client_fuzz", "watch", b"\x0d" + frame(OK, i64(12)))


# etcd_answer_fuzz: byte 0 = piece size - 1; then an HTTP answer of etcd's JSON gateway.
def b64(text):
    import base64
    return base64.b64encode(text.encode()).decode()


def http(body, chunked=False):
    if chunked:
        return ("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
                + "".join("%x\r\n%s\r\n" % (len(line) + 1, line + "\n") for line in body) + "0\r\n\r\n")
    return "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)


HEADER = {"cluster_id": "1", "member_id": "2", "revision": "41", "raft_term": "3"}
kv = lambda k, v, mod: {"key": b64("/meridian/kv/" + k), "value": b64(v), "mod_revision": str(mod),
                        "create_revision": "5", "version": "1"}
def etcd(name, piece, text):
    seed("etcd_answer_fuzz", name, bytes([piece]) + text.encode())


ERROR = json.dumps({"error": "etcdserver: no leader", "code": 14, "message": "etcdserver: no leader"})
etcd("range", 15, http(json.dumps(
    {"header": HEADER, "kvs": [kv("mesh/hb/1", "1", 40), kv("mesh/hb/2", "1", 41)], "count": "2"})))
etcd("txn-failed", 255, http(json.dumps(
    {"header": HEADER, "responses": [{"response_range": {"header": HEADER, "kvs": [kv("mesh/leader", "3", 12)]}}]})))
etcd("lease", 3, http(json.dumps({"header": HEADER, "ID": "7587869", "TTL": "6"})))
etcd("error", 64, "HTTP/1.1 503 Service Unavailable\r\nContent-Length: %d\r\n\r\n%s" % (len(ERROR), ERROR))
etcd("watch", 31, http([
    json.dumps({"result": {"header": HEADER, "created": True}}),
    json.dumps({"result": {"header": HEADER, "events": [{"kv": kv("mesh/left/4", "1", 42)}]}})], chunked=True))
etcd("run-record", 127, "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + json.dumps(
    {"version": "0.1.0", "config_hash": "ab12", "nonce": "00ff10", "proof": "99"}))
