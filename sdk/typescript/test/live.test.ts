// The client against a real `plaza up`: negotiate, join, frames, movement seen by another
// client within quantization, ping RTT, resync after a forced decode error, reconnect with the
// resume token after the socket drops, and a terminal close that is not retried.
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import WebSocket from "ws";

import { writeFileSync } from "node:fs";

import { PlazaClient, type WebSocketLike, positionM, zeroPose, type Pose, type Vec3, pb } from "../src/index.js";
import { replay, type RecordedEntry, type RecordedExchange } from "./pickup.js";
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

  it("predicts a pickup race with Rapier and reconciles it with the server's answers", async () => {
    const a = client("live-pickup", "gina");
    const b = client("live-pickup", "hal");
    await until(() => a.state === "joined" && b.state === "joined" && a.propList().some((p) => p.record), 15_000, "both joined, props seen");
    // The prop nearest the spawn point; both walk to it (a first placement at the spawn, then
    // 3 m/s steps at 20 Hz, within the server's speed limit).
    const s = a.joined!.position!;
    const spawn: Vec3 = [s.x, s.y, s.z];
    const dist = (p: Vec3) => Math.hypot(p[0] - spawn[0], p[2] - spawn[2]);
    const prop = a.propList().filter((p) => p.record).map((p) => ({ id: p.propId, at: positionM(p.record!.pose) })).sort((x, y) => dist(x.at) - dist(y.at))[0]!;
    const goal = (dx: number): Vec3 => [prop.at[0] + dx, spawn[1], prop.at[2]];
    const walk = async (c: PlazaClient, to: Vec3) => {
      // Each client is placed at its own spawn point (Joined.position), then walks.
      const js = c.joined!.position!;
      let at: Vec3 = [js.x, js.y, js.z];
      c.move({ ...zeroPose(), position: at }, { instant: true });
      for (;;) {
        await new Promise((r) => setTimeout(r, 50));
        const d: Vec3 = [to[0] - at[0], 0, to[2] - at[2]];
        const n = Math.hypot(d[0], d[2]);
        if (n < 1e-3) break;
        const k = Math.min(1, 0.15 / n);
        at = [at[0] + d[0] * k, at[1], at[2] + d[2] * k];
        c.move({ ...zeroPose(), position: at, velocity: [(d[0] * k) / 0.05, 0, (d[2] * k) / 0.05], movementKind: 1 });
      }
      // The stop, one movement period later (a move in the same millisecond is refused NON_POSITIVE_DT).
      await new Promise((r) => setTimeout(r, 50));
      const last = c.move({ ...zeroPose(), position: at });
      // Until the room has applied the last move (the own state names it).
      await until(() => (c.decoder.own()?.lastInputSeq ?? 0) >= last, 5_000, "the last move applied");
      return at;
    };
    const [feetA, feetB] = await Promise.all([walk(a, goal(-0.6)), walk(b, goal(0.6))]);
    // Record both sides from here on, in arrival order.
    const t0 = performance.now();
    const record = (c: PlazaClient, feet: Vec3) => {
      const entries: RecordedEntry[] = [];
      const t = () => performance.now() - t0;
      const offs = [
        c.on("event", (ev: pb.Event) => {
          if (ev.kind.case === "prop") {
            const e = ev.kind.value;
            entries.push({ t: t(), kind: "prop", propId: e.propId, holderEntity: e.holderEntity, position: e.position && [e.position.x, e.position.y, e.position.z] });
          } else if (ev.kind.case === "rejected") {
            entries.push({ t: t(), kind: "rejected", inReplyTo: ev.kind.value.inReplyTo, reason: ev.kind.value.reason });
          }
        }),
        c.on("frame", (f) => {
          for (const id of f.frame.changed) {
            const rec = c.decoder.get(id);
            if (rec && id === prop.id + 1048576) entries.push({ t: t(), kind: "pose", propId: prop.id, position: positionM(rec.pose) });
          }
          entries.push({ t: t(), kind: "frame" });
        }),
      ];
      return { entries, feet, stop: () => offs.forEach((off) => off()) };
    };
    const ra = record(a, feetA);
    const rb = record(b, feetB);
    const frames = (r: { entries: RecordedEntry[] }, after = -Infinity) => r.entries.filter((e) => e.kind === "frame" && e.t > after).length;
    await until(() => frames(ra) >= 2 && frames(rb) >= 2, 5_000, "frames before the grab");
    // Both grab in the same instant; the server gives the prop to one of them.
    const now = performance.now() - t0;
    const seqA = a.interact(pb.InteractionKind.PICKUP, prop.id);
    const seqB = b.interact(pb.InteractionKind.PICKUP, prop.id);
    ra.entries.push({ t: now, kind: "grab", propId: prop.id, seq: seqA });
    rb.entries.push({ t: now, kind: "grab", propId: prop.id, seq: seqB });
    await until(() => a.propList().find((p) => p.propId === prop.id)!.holderEntity !== 0, 5_000, "the prop is held");
    await until(() => frames(ra, now) >= 6 && frames(rb, now) >= 6, 5_000, "frames after the grab");
    ra.stop();
    rb.stop();
    const holder = a.propList().find((p) => p.propId === prop.id)!.holderEntity;
    expect([a.entityId, b.entityId]).toContain(holder);
    const exchanges: RecordedExchange[] = [a, b].map((c, i) => {
      const r = i === 0 ? ra : rb;
      return { outcome: c.entityId === holder ? "accepted" : "refused", ownEntity: c.entityId, ownFeet: r.feet, propId: prop.id, entries: [...r.entries].sort((x, y) => x.t - y.t) };
    });
    for (const x of exchanges) {
      const { predictor, frames } = await replay(x);
      expect(frames.length, x.outcome).toBeGreaterThan(2);
      expect(predictor.maxVisibleMispredictionFrames, x.outcome).toBeLessThanOrEqual(1);
      expect(frames[frames.length - 1]!.heldByMe, x.outcome).toBe(x.outcome === "accepted");
      expect(predictor.undone, x.outcome).toBe(x.outcome === "refused" ? 1 : 0);
      if (x.outcome === "accepted") {
        // The predicted hand position matches where the server holds the prop (its frames).
        const server = [...x.entries].reverse().find((e) => e.kind === "pose") as { position: Vec3 } | undefined;
        const drawn = frames[frames.length - 1]!.position;
        expect(server, "the held prop's pose is in the frames").toBeDefined();
        expect(Math.hypot(drawn[0] - server!.position[0], drawn[1] - server!.position[1], drawn[2] - server!.position[2])).toBeLessThan(0.05);
      }
      predictor.free();
    }
    // PLAZA_RECORD_PICKUP=path writes this exchange as the replay fixture.
    const out = process.env.PLAZA_RECORD_PICKUP;
    if (out) writeFileSync(out, JSON.stringify({ recordedWith: "sdk/typescript/test/live.test.ts against plaza up", exchanges }, null, 1) + "\n");
  });
});
