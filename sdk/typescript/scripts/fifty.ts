/**
 * N SDK clients under Node in one room of a real `plaza up`, each walking (issue 14).
 *
 * Every client joins the same room, is placed at its own start point, walks the standard random
 * walk of issue 13 (heading drifts ±0.3 rad and speed ±0.5 m/s per 100 ms input, 0–4 m/s, kept
 * inside a 16 m × 10 m field south of the fountain) for the run's duration, then stops. After a
 * settle period each client must hold every other client's avatar (min(N - 1, the room's
 * interest cap) of them: the class tier shows the nearest 32, the stadium tier 256) at the
 * position that client last sent, within quantization (1 mm per axis), with 0 decode errors and
 * 0 check failures.
 *
 * `runFifty` is used by `scripts/fifty-main.ts` (`npm run fifty`) and by the short e2e run
 * (`e2e/fifty.test.ts`).
 */
import WebSocket from "ws";

import { PlazaClient, positionM, zeroPose, type Pose, type WebSocketLike } from "../src/index.js";

export interface FiftyOptions {
  /** `ws://…/v1/ws` of the gateway. */
  wsUrl: string;
  clients: number;
  durationS: number;
  room?: string;
  /** Seconds after the stop for the last poses to arrive. */
  settleS?: number;
  /** Deterministic walks. */
  seed?: number;
  log?: (line: string) => void;
}

export interface FiftyResult {
  clients: number;
  durationS: number;
  joinedWithinMs: number;
  /** The room's interest cap (Joined): each client holds min(N - 1, cap) others. */
  interestCap: number;
  /** Pairs (observer, walker) checked, and those not within quantization (or not seen). */
  pairs: number;
  pairsOff: number;
  /** Largest per-axis difference between what a client sent last and what another holds, m. */
  maxErrorM: number;
  /** Moves the server corrected (refused), seen by the walkers. */
  corrections: number;
  /** The fewest other avatars one client held at the end. */
  minSeen: number;
  decodeErrors: number;
  checkFailures: number;
  checksPassed: number;
  resyncs: number;
  reconnects: number;
  framesPerClientPerS: number;
  bytesDownPerClientPerS: number;
  bytesUpPerClientPerS: number;
  /** SDK decode time per snapshot frame: mean and max over every frame of every client, µs. */
  decodeUsPerFrameMean: number;
  decodeUsPerFrameMax: number;
  framesDecoded: number;
  movesSent: number;
}

/** Max per-axis error of a quantized position (0.5 mm rounding plus f32 rounding). */
const QUANT_M = 0.001 + 1e-6;
const FIELD = { x0: -8, x1: 8, z0: -15, z1: -5 };

function rng(seed: number): () => number {
  let s = seed >>> 0 || 1;
  return () => {
    s ^= s << 13;
    s ^= s >>> 17;
    s ^= s << 5;
    return (s >>> 0) / 4294967296;
  };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function runFifty(o: FiftyOptions): Promise<FiftyResult> {
  const log = o.log ?? (() => {});
  const room = o.room ?? `fifty-${Date.now()}`;
  const settleS = o.settleS ?? 2;
  const random = rng(o.seed ?? 14);
  const ws = (url: string) => new WebSocket(url) as unknown as WebSocketLike;
  const clients: PlazaClient[] = [];
  for (let i = 0; i < o.clients; i++) {
    clients.push(new PlazaClient({ url: o.wsUrl, room, authToken: `guest:walker${i}`, clientName: "plaza-fifty", webSocket: ws, backoff: { baseMs: 100, maxMs: 2000 } }).connect());
  }
  const t0 = performance.now();
  try {
    while (!clients.every((c) => c.state === "joined")) {
      if (performance.now() - t0 > 30_000) {
        const n = clients.filter((c) => c.state === "joined").length;
        throw new Error(`only ${n} of ${o.clients} clients joined within 30 s`);
      }
      await sleep(20);
    }
    const joinedWithinMs = performance.now() - t0;
    log(`${o.clients} clients joined room ${room} in ${joinedWithinMs.toFixed(0)} ms`);

    // Everyone starts at the spawn point (a client may only place itself there) with a random
    // heading, and fans out.
    let corrections = 0;
    const walkers = clients.map((c) => {
      const sp = c.joined!.position!;
      const pose: Pose = { ...zeroPose(), position: [sp.x, sp.y, sp.z], animFlags: 1 };
      c.move(pose, { instant: true });
      c.on("correction", () => corrections++);
      return { c, pose, heading: random() * 2 * Math.PI, speed: 1 + 2 * random() };
    });
    await sleep(300);

    // Counters from here on (the placement is not part of the walk's figures).
    const base = clients.map((c) => c.stats());
    const walkStart = performance.now();
    let moves = 0;
    let last = walkStart;
    while (performance.now() - walkStart < o.durationS * 1000) {
      await sleep(100);
      const now = performance.now();
      const dt = Math.min((now - last) / 1000, 0.25);
      last = now;
      for (const w of walkers) {
        w.heading += (random() * 2 - 1) * 0.3;
        w.speed = Math.min(Math.max(w.speed + (random() * 2 - 1) * 0.5, 0), 4);
        let [x, , z] = w.pose.position;
        // Turn back toward the field's centre at its edges.
        if (x < FIELD.x0 + 1 || x > FIELD.x1 - 1 || z < FIELD.z0 + 1 || z > FIELD.z1 - 1) {
          w.heading = Math.atan2((FIELD.x0 + FIELD.x1) / 2 - x, (FIELD.z0 + FIELD.z1) / 2 - z);
        }
        const v: [number, number, number] = [Math.sin(w.heading) * w.speed, 0, Math.cos(w.heading) * w.speed];
        x = Math.min(Math.max(x + v[0] * dt, FIELD.x0), FIELD.x1);
        z = Math.min(Math.max(z + v[2] * dt, FIELD.z0), FIELD.z1);
        w.pose = { ...w.pose, position: [x, 0, z], velocity: v, yawDeg: (w.heading * 180) / Math.PI, movementKind: w.speed > 0.1 ? 1 : 0 };
        w.c.move(w.pose);
        moves++;
      }
    }
    const walkS = (performance.now() - walkStart) / 1000;
    const mid = clients.map((c) => c.stats());
    for (const w of walkers) {
      w.pose = { ...w.pose, velocity: [0, 0, 0], movementKind: 0 };
      w.c.move(w.pose);
    }
    await sleep(settleS * 1000);

    // Every client holds every other (or, when the room's interest cap is below N - 1, that many:
    // its nearest) at its last sent position.
    let pairs = 0;
    let pairsOff = 0;
    let maxErrorM = 0;
    let minSeen = Infinity;
    const interestCap = clients[0]!.joined?.interestCap ?? 0;
    const expectSeen = Math.min(o.clients - 1, interestCap > 0 ? interestCap : o.clients);
    const byEntity = new Map(walkers.map((w) => [w.c.entityId, w]));
    for (const obs of clients) {
      const held = new Map(obs.avatarList().map((a) => [a.entityId, a]));
      const seen = [...held.keys()].filter((id) => id !== obs.entityId && byEntity.has(id)).length;
      minSeen = Math.min(minSeen, seen);
      // Each walker this observer should hold but does not is one pair off.
      pairs += expectSeen;
      pairsOff += Math.max(expectSeen - seen, 0);
      for (const [id, w] of byEntity) {
        if (id === obs.entityId) continue;
        const a = held.get(id);
        if (!a) continue;
        const p = positionM(a.record.pose);
        const err = Math.max(...[0, 1, 2].map((k) => Math.abs(p[k]! - w.pose.position[k]!)));
        maxErrorM = Math.max(maxErrorM, err);
        if (err > QUANT_M) pairsOff++;
      }
    }
    const end = clients.map((c) => c.stats());
    const sum = (f: (i: number) => number) => clients.reduce((acc, _, i) => acc + f(i), 0);
    const framesWalk = sum((i) => mid[i]!.framesTotal - base[i]!.framesTotal);
    const decodeMsWalk = sum((i) => mid[i]!.decodeMsTotal - base[i]!.decodeMsTotal);
    const down = sum((i) => mid[i]!.bytesDownTotal - base[i]!.bytesDownTotal) / o.clients / walkS;
    const up = sum((i) => mid[i]!.bytesUpTotal - base[i]!.bytesUpTotal) / o.clients / walkS;
    return {
      clients: o.clients,
      durationS: walkS,
      interestCap,
      corrections,
      joinedWithinMs,
      pairs,
      pairsOff,
      maxErrorM,
      minSeen: Number.isFinite(minSeen) ? minSeen : 0,
      decodeErrors: sum((i) => end[i]!.decodeErrors),
      checkFailures: sum((i) => end[i]!.checkFailures),
      checksPassed: sum((i) => end[i]!.checksPassed),
      resyncs: sum((i) => end[i]!.resyncs),
      reconnects: sum((i) => end[i]!.reconnects),
      framesPerClientPerS: framesWalk / o.clients / walkS,
      bytesDownPerClientPerS: down,
      bytesUpPerClientPerS: up,
      decodeUsPerFrameMean: framesWalk > 0 ? (decodeMsWalk / framesWalk) * 1000 : 0,
      decodeUsPerFrameMax: Math.max(...end.map((s) => s.decodeMsMax)) * 1000,
      framesDecoded: framesWalk,
      movesSent: moves,
    };
  } finally {
    for (const c of clients) c.close();
  }
}

/** Whether a run passed issue 14's bar. */
export function verdict(r: FiftyResult): string[] {
  const bad: string[] = [];
  if (r.decodeErrors !== 0) bad.push(`${r.decodeErrors} decode errors`);
  if (r.checkFailures !== 0) bad.push(`${r.checkFailures} check failures`);
  if (r.pairsOff !== 0) bad.push(`${r.pairsOff} of ${r.pairs} (observer, walker) pairs not within quantization`);
  if (r.checksPassed === 0) bad.push("no frame carried a check");
  return bad;
}
