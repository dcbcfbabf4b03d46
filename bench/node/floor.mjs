#!/usr/bin/env node
// The floor of any Node.js lock library on this machine, for W1: the commands a safe lock sends
// (SET key <random token> NX PX ttl, then the token-checked delete: DELEX IFEQ on Redis >= 8.4,
// DELIFEQ on Valkey 9, else a Lua script) written by hand in RESP on one bare `net.Socket`, each
// reply awaited as it arrives. No client library, no lock logic, no thread handoff: what Node's
// event loop itself allows a cycle. node-redlock does the same I/O through ioredis on the same
// loop; leasehold-node hands each call to its Rust runtime's thread.
//
//   node bench/node/floor.mjs --url redis://127.0.0.1:PORT/ --workload W1 [--key-prefix P]
//        [--cycles N] [--warmup N]
//
// Needs only node. Other workloads are skipped (this is a floor, not a lock). See
// bench/README.md.

import net from "node:net";
import { randomBytes } from "node:crypto";

import { TTL_MS, run } from "./benchcommon.mjs";

const RELEASE_SCRIPT =
  "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";

/** A command in RESP: an array of bulk strings. */
function encode(args) {
  let out = `*${args.length}\r\n`;
  for (const a of args) out += `$${Buffer.byteLength(a)}\r\n${a}\r\n`;
  return out;
}

/**
 * One connection, one command at a time. Every reply these commands get is one line (`+OK`,
 * `$-1` or `_` for nil, `:n`, `-ERR ...`), so a reply is whole at its first CRLF; bytes are
 * gathered until then.
 */
class BareSocket {
  static async open(url) {
    const u = new URL(url);
    const sock = net.connect(Number(u.port || 6379), u.hostname.replace(/^\[|\]$/g, ""));
    sock.setNoDelay(true);
    await new Promise((resolve, reject) => {
      sock.once("connect", resolve);
      sock.once("error", reject);
    });
    // The bench's servers take no password.
    return new BareSocket(sock);
  }

  constructor(sock) {
    this.sock = sock;
    this.buf = "";
    this.pending = null;
    sock.on("data", (d) => {
      this.buf += d.toString("latin1");
      const end = this.buf.indexOf("\r\n");
      if (end < 0 || !this.pending) return;
      const line = this.buf.slice(0, end);
      this.buf = this.buf.slice(end + 2);
      const { resolve } = this.pending;
      this.pending = null;
      resolve(line);
    });
    sock.on("error", (e) => {
      if (this.pending) this.pending.reject(e);
      this.pending = null;
    });
  }

  /** Sends one command; its reply line. */
  call(args) {
    return new Promise((resolve, reject) => {
      this.pending = { resolve, reject };
      this.sock.write(encode(args));
    });
  }

  expectOk(line) {
    if (line !== "+OK") throw new Error(`unexpected reply ${JSON.stringify(line)}`);
  }

  close() {
    this.sock.destroy();
  }
}

/** The server's token-checked delete, as leasehold picks it: the fastest it has. */
async function checkedDelete(conn, prefix) {
  const probe = `${prefix}:probe`;
  for (const [name, args] of [
    ["DELEX key IFEQ <token>", (k, t) => ["DELEX", k, "IFEQ", t]],
    ["DELIFEQ key <token>", (k, t) => ["DELIFEQ", k, t]],
  ]) {
    const reply = await conn.call(args(probe, "x"));
    if (!reply.startsWith("-")) return { name, args };
  }
  return { name: "EVAL <release script> 1 key <token>", args: (k, t) => ["EVAL", RELEASE_SCRIPT, "1", k, t] };
}

async function open(a) {
  if (a.workload !== "W1") return { skipped: "node_floor is W1's floor only (the commands of one lock cycle, one after the other)" };
  const conn = await BareSocket.open(a.url);
  const del = await checkedDelete(conn, a.keyPrefix);
  return {
    base: {
      version: process.version,
      client: "one net.Socket, commands encoded by hand (RESP), replies read as one line",
      runtime: `node ${process.version}, one event loop`,
      api: `SET key <16 random bytes, hex> NX PX ${TTL_MS}; ${del.name}`,
      urls: [a.url],
      retry: "none",
      nodes: 1,
    },
    acquire: async (key) => {
      const token = randomBytes(16).toString("hex");
      conn.expectOk(await conn.call(["SET", key, token, "NX", "PX", String(TTL_MS)]));
      return { key, token };
    },
    release: async ({ key, token }) => {
      const reply = await conn.call(del.args(key, token));
      if (reply !== ":1") throw new Error(`the token-checked delete answered ${JSON.stringify(reply)}`);
    },
    close: async () => conn.close(),
  };
}

run("floor.mjs", "node_floor", open);
