/**
 * Starts a real `plaza up` (the binary cargo built: `PLAZA_BIN`, else target/debug/plaza) on free
 * ports and waits until it is ready. Used by the live tests, the browser test and the scripts.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync } from "node:fs";
import { createServer } from "node:net";
import { join } from "node:path";

import { REPO_ROOT } from "./fixtures.js";

export interface Plaza {
  /** `ws://127.0.0.1:PORT/v1/ws` */
  wsUrl: string;
  /** `http://127.0.0.1:PORT` (the client listener, which also serves the viewer) */
  httpUrl: string;
  adminUrl: string;
  proc: ChildProcess;
  stop(): Promise<void>;
  log(): string;
}

export function plazaBin(): string {
  const bin = process.env.PLAZA_BIN ?? join(REPO_ROOT, "target", "debug", "plaza");
  if (!existsSync(bin)) throw new Error(`no plaza binary at ${bin}: run \`cargo build -p plaza-ops --bin plaza\` or set PLAZA_BIN`);
  return bin;
}

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const addr = s.address();
      const port = typeof addr === "object" && addr ? addr.port : 0;
      s.close(() => resolve(port));
    });
  });
}

export async function startPlaza(extraArgs: string[] = [], env: Record<string, string> = {}): Promise<Plaza> {
  const [port, admin] = [await freePort(), await freePort()];
  let out = "";
  const proc = spawn(plazaBin(), ["up", "--listen", `127.0.0.1:${port}`, "--admin-listen", `127.0.0.1:${admin}`, ...extraArgs], {
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, RUST_LOG: process.env.RUST_LOG ?? "warn", ...env },
  });
  proc.stdout!.on("data", (d: Buffer) => (out += d.toString()));
  proc.stderr!.on("data", (d: Buffer) => (out += d.toString()));
  const exited = new Promise<void>((resolve) => proc.once("exit", () => resolve()));
  const adminUrl = `http://127.0.0.1:${admin}`;
  const deadline = Date.now() + 30_000;
  for (;;) {
    if (proc.exitCode !== null) throw new Error(`plaza up exited (${proc.exitCode}):\n${out}`);
    try {
      const r = await fetch(`${adminUrl}/readyz`);
      if (r.ok) break;
    } catch {
      // Not listening yet.
    }
    if (Date.now() > deadline) {
      proc.kill("SIGKILL");
      throw new Error(`plaza up not ready within 30 s:\n${out}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return {
    wsUrl: `ws://127.0.0.1:${port}/v1/ws`,
    httpUrl: `http://127.0.0.1:${port}`,
    adminUrl,
    proc,
    log: () => out,
    async stop() {
      if (proc.exitCode === null) {
        proc.kill("SIGTERM");
        const t = setTimeout(() => proc.kill("SIGKILL"), 10_000);
        await exited;
        clearTimeout(t);
      }
    },
  };
}

/** Waits until `cond()` holds (checked every 20 ms), or throws after `ms`. */
export async function until(cond: () => boolean, ms: number, what: string): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}
