// The client against a real `plaza up`: negotiate, join, frames, movement seen by another
// client within quantization, ping RTT, resync after a forced decode error, reconnect with the
// resume token after the socket drops, and a terminal close that is not retried.
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import WebSocket from "ws";

import { PlazaClient, type WebSocketLike, positionM, zeroPose, type Pose } from "../src/index.js";
import { startPlaza, until, type Plaza } from "./plaza.js";

const PKG = join(dirname(fileURLToPath(import.meta.url)), "..");
let plaza: Plaza;
const clients: PlazaClient[] = [];
const ws = (url: string) => new WebSocket(url) as unknown as WebSocketLike;

function client(room: string, name: string, extra: Partial<ConstructorParameters<typeof PlazaClient>[0]> = {}): PlazaClient {
  const c = new PlazaClient({ url: plaza.wsUrl, room, authToken: `guest:${name}`, webSocket: ws, backoff: { baseMs: 50, maxMs: 500 }, ...extra });
  clients.push(c);
  return c.connect();
}

beforeAll(async () => {
  plaza = await startPlaza();
}, 60_000);

afterAll(async () => {
  for (const c of clients) c.close();
  await plaza?.stop();
});

describe("PlazaClient against plaza up", () => {
  it("serves the viewer at / and its committed bundle at /viewer.js", async () => {
    const page = await fetch(`${plaza.httpUrl}/`);
    expect(page.status).toBe(200);
    expect(page.headers.get("content-type")).toContain("text/html");
    expect(await page.text()).toContain('<script type="module" src="viewer.js">');
    const js = await fetch(`${plaza.httpUrl}/viewer.js`);
    expect(js.headers.get("content-type")).toContain("javascript");
    // (A stale binary serves an older bundle: rebuild plaza after `npm run build:viewer`.)
    const served = await js.text();
    expect(served === readFileSync(join(PKG, "viewer", "dist", "viewer.js"), "utf8"), "plaza serves the committed bundle").toBe(true);
  });

  it("joins, moves, and is seen by another client within quantization", async () => {
    const a = client("live-move", "alice");
    const b = client("live-move", "bob");
    await until(() => a.state === "joined" && b.state === "joined", 15_000, "both joined");
    expect(typeof a.sessionId).toBe("bigint");
    expect(a.sessionId).not.toBe(0n);
    expect(a.entityId).not.toBe(b.entityId);
    const spawn = a.joined!.position!;
    // Place at the spawn point, then walk +x at 1 m/s for 1.5 s at 10 Hz.
    const pose: Pose = { ...zeroPose(), position: [spawn.x, spawn.y, spawn.z], animFlags: 1 };
    a.move(pose, { instant: true });
    const t0 = performance.now();
    let last = pose;
    for (let i = 1; i <= 15; i++) {
      await new Promise((r) => setTimeout(r, 100));
      const t = (performance.now() - t0) / 1000;
      last = { ...pose, position: [spawn.x + t, spawn.y, spawn.z], velocity: [1, 0, 0], movementKind: 1 };
      a.move(last);
    }
    last = { ...last, velocity: [0, 0, 0], movementKind: 0 };
    a.move(last);
    await until(() => {
      const seen = b.avatarList().find((x) => x.entityId === a.entityId);
      return !!seen && Math.abs(positionM(seen.record.pose)[0] - last.position[0]) <= 0.001 + 1e-6;
    }, 10_000, "bob sees alice at her last position");
    const seen = b.avatarList().find((x) => x.entityId === a.entityId)!;
    const p = positionM(seen.record.pose);
    expect(Math.abs(p[2] - last.position[2])).toBeLessThanOrEqual(0.001 + 1e-6);
    // Alice's own state travels back to her.
    await until(() => a.decoder.own() !== null, 5_000, "own state");
    expect(a.stats().framesPerS).toBeGreaterThan(5);
    expect(b.stats().decodeErrors).toBe(0);
    await until(() => Number.isFinite(a.stats().rttMs), 5_000, "a pong");
    expect(a.stats().rttMs).toBeGreaterThanOrEqual(0);
  });

  it("replays what exists to a late subscriber", async () => {
    const a = client("live-replay", "carol");
    const b = client("live-replay", "dave");
    await until(() => a.state === "joined" && b.state === "joined", 15_000, "both joined");
    const spawn = a.joined!.position!;
    a.move({ ...zeroPose(), position: [spawn.x, spawn.y, spawn.z], animFlags: 1 }, { instant: true });
    await until(() => b.avatarList().some((x) => x.entityId === a.entityId), 10_000, "dave sees carol");
    const replayed: number[] = [];
    const off = b.onAvatarEnter((x) => replayed.push(x.entityId));
    expect(replayed).toContain(a.entityId);
    off();
    const props: number[] = [];
    b.onProp((p) => props.push(p.propId))();
    // The default plaza room has props; they are entities of kind 1 in the frames.
    expect(props.length).toBeGreaterThan(0);
  });

  it("asks for a keyframe after a broken chain and recovers", async () => {
    const a = client("live-resync", "erin");
    await until(() => a.state === "joined" && a.decoder.lastSeq() !== null, 15_000, "joined with a frame");
    // Forget everything: the next delta breaks the chain.
    a.decoder.reset();
    await until(() => a.stats().resyncs === 1 && a.decoder.lastSeq() !== null, 5_000, "resync and keyframe");
    const seq = a.decoder.lastSeq()!;
    await until(() => a.decoder.lastSeq()! > seq + 3, 5_000, "deltas after the keyframe");
    expect(a.stats().resyncs).toBe(1);
  });

  it("reconnects after the socket drops and resumes the same session", async () => {
    const a = client("live-resume", "frank");
    await until(() => a.state === "joined", 15_000, "joined");
    const session = a.sessionId;
    const entity = a.entityId;
    const closes: { code: number; willRetry: boolean }[] = [];
    a.on("close", (c) => closes.push(c));
    // Drop the socket the way a network does (no close handshake).
    (a as unknown as { ws: WebSocket }).ws.terminate();
    await until(() => closes.length === 1, 5_000, "close seen");
    expect(closes[0]!.willRetry).toBe(true);
    await until(() => a.state === "joined" && a.stats().reconnects === 1, 15_000, "rejoined");
    expect(a.sessionId).toBe(session);
    expect(a.entityId).toBe(entity);
  });

  it("does not retry a terminal close", async () => {
    const a = new PlazaClient({ url: plaza.wsUrl, room: "live-auth", authToken: "not-a-valid-token", webSocket: ws, backoff: { baseMs: 10 } });
    clients.push(a);
    const closes: { code: number; name: string; willRetry: boolean }[] = [];
    a.on("close", (c) => closes.push(c));
    a.connect();
    await until(() => a.state === "closed", 10_000, "closed");
    expect(closes).toHaveLength(1);
    expect(closes[0]).toMatchObject({ code: 4003, name: "auth", willRetry: false });
  });
});
