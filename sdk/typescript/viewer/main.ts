/**
 * The room viewer `plaza up` serves at `/`: join a room as a guest, walk with the keyboard, see
 * the others smoothed on a top-down canvas with their names from the roster, the props and who
 * holds them, a consent prompt, and net stats. Query: `?room=NAME&name=GUEST`.
 *
 * Built by `npm run build:viewer` into viewer/dist/viewer.js (committed; a test proves it is
 * rebuilt from these sources). `window.plazaViewer` exposes the state to the browser test.
 */
import { MovementPacer, PlazaClient, Replicas, pb, positionM, type Pose, type ShownAvatar, zeroPose } from "../src/index.js";

const params = new URLSearchParams(location.search);
const room = params.get("room") || "plaza";
const name = (params.get("name") || `guest${Math.floor(Math.random() * 1e4)}`).replace(/[^A-Za-z0-9._-]/g, "").slice(0, 32) || "guest";
const wsUrl = `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/v1/ws`;

const client = new PlazaClient({ url: wsUrl, room, authToken: `guest:${name}`, clientName: "plaza-viewer" });
const replicas = new Replicas(client);
const pacer = new MovementPacer();
const $ = (id: string) => document.getElementById(id)!;
$("room").textContent = room;
$("me").textContent = name;

// === Own avatar (moved locally, corrected by the server) ===

const WALK = 2.5;
const JOG = 4.5;
const BOUND = 31.5;
let own: Pose | null = null;
const keys = new Set<string>();
let lastStep = performance.now();

client.on("state", (s) => ($("state").textContent = s));
client.on("joined", (j) => {
  const p = j.position ?? { x: 0, y: 0, z: 0 };
  own = { ...zeroPose(), position: [p.x, p.y, p.z], animFlags: pb.AnimFlag.GROUNDED };
  pacer.reset();
  client.move(own, { instant: true });
  announce();
});
client.on("correction", (c) => {
  if (!own || !c.position) return;
  own = { ...own, position: [c.position.x, c.position.y, c.position.z], velocity: [0, 0, 0] };
});

/** Tells the room our display name (the roster carries it to the others). */
function announce(): void {
  client.announce(name);
}
client.on("teleported", (t) => {
  if (t.entityId === client.entityId && own && t.position) {
    own = { ...own, position: [t.position.x, t.position.y, t.position.z], yawDeg: t.rotationY };
    pacer.reset();
  } else {
    replicas.markTeleported(t.entityId);
  }
});

function step(now: number): void {
  const dt = Math.min((now - lastStep) / 1000, 0.1);
  lastStep = now;
  if (!own || client.state !== "joined") return;
  let dx = 0;
  let dz = 0;
  if (keys.has("KeyW") || keys.has("ArrowUp")) dz += 1;
  if (keys.has("KeyS") || keys.has("ArrowDown")) dz -= 1;
  if (keys.has("KeyD") || keys.has("ArrowRight")) dx += 1;
  if (keys.has("KeyA") || keys.has("ArrowLeft")) dx -= 1;
  const n = Math.hypot(dx, dz);
  const speed = keys.has("ShiftLeft") || keys.has("ShiftRight") ? JOG : WALK;
  const v: [number, number, number] = n > 0 ? [(dx / n) * speed, 0, (dz / n) * speed] : [0, 0, 0];
  const x = Math.max(-BOUND, Math.min(BOUND, own.position[0] + v[0] * dt));
  const z = Math.max(-BOUND, Math.min(BOUND, own.position[2] + v[2] * dt));
  const yaw = n > 0 ? (Math.atan2(v[0], v[2]) * 180) / Math.PI : own.yawDeg;
  own = { ...own, position: [x, own.position[1], z], velocity: v, yawDeg: yaw, movementKind: n === 0 ? 0 : speed === JOG ? 2 : 1 };
  if (pacer.due(now / 1000, own)) client.move(own);
}

const canvas = $("canvas") as HTMLCanvasElement;
canvas.addEventListener("keydown", (e) => {
  keys.add(e.code);
  if (e.code === "KeyE") pickOrPlace();
  if (e.code.startsWith("Arrow")) e.preventDefault();
});
canvas.addEventListener("keyup", (e) => keys.delete(e.code));
canvas.addEventListener("blur", () => keys.clear());
canvas.focus();

// === Props ===

function pickOrPlace(): void {
  if (!own) return;
  const me = client.entityId;
  const held = client.propList().find((p) => p.holderEntity === me);
  if (held) {
    const yaw = (own.yawDeg * Math.PI) / 180;
    client.interact(pb.InteractionKind.PLACE, held.propId, [own.position[0] + Math.sin(yaw), own.position[1] + 0.5, own.position[2] + Math.cos(yaw)]);
    return;
  }
  let best: { id: number; d: number } | null = null;
  for (const p of client.propList()) {
    if (!p.record || p.holderEntity !== 0) continue;
    const q = positionM(p.record.pose);
    const d = Math.hypot(q[0] - own.position[0], q[2] - own.position[2]);
    if (d < 2.5 && (!best || d < best.d)) best = { id: p.propId, d };
  }
  if (best) client.interact(pb.InteractionKind.PICKUP, best.id);
}

// === Consent ===

let prompt: pb.ConsentEvent | null = null;
client.onConsent((c) => {
  if (c.targetEntity === client.entityId && c.state === "requested") {
    prompt = c;
    $("consent-text").textContent = `${who(c.requesterEntity)} asks: ${c.kind.replace("_", " ")}`;
    $("consent").style.display = "block";
  } else if (prompt && prompt.consentId === c.consentId) {
    prompt = null;
    $("consent").style.display = "none";
  }
});
$("consent-yes").onclick = () => answer(pb.ConsentOp.CONSENT);
$("consent-no").onclick = () => answer(pb.ConsentOp.DECLINE);
function answer(op: pb.ConsentOp): void {
  if (prompt) client.consent(op, { consentId: prompt.consentId });
  prompt = null;
  $("consent").style.display = "none";
  canvas.focus();
}
canvas.addEventListener("click", (e) => {
  const hit = shown.find((a) => {
    const [sx, sy] = toScreen(a.rendered.position[0], a.rendered.position[2]);
    return Math.hypot(sx - e.offsetX, sy - e.offsetY) < 14;
  });
  if (hit) client.consent(pb.ConsentOp.REQUEST, { kind: "hand_hold", targetEntity: hit.entityId });
});

// === Drawing ===

let shown: ShownAvatar[] = [];
let scale = 10;
let originX = 0;
let originY = 0;

function who(entity: number): string {
  if (entity === client.entityId) return name;
  const a = client.avatar(entity);
  return a?.name || a?.wallet || `#${entity}`;
}

function toScreen(x: number, z: number): [number, number] {
  return [originX + x * scale, originY - z * scale];
}

function draw(): void {
  const dpr = window.devicePixelRatio || 1;
  const w = canvas.clientWidth;
  const h = canvas.clientHeight;
  if (canvas.width !== w * dpr || canvas.height !== h * dpr) {
    canvas.width = w * dpr;
    canvas.height = h * dpr;
  }
  const g = canvas.getContext("2d")!;
  g.setTransform(dpr, 0, 0, dpr, 0, 0);
  scale = Math.min(w, h) / 68;
  originX = w / 2;
  originY = h / 2;
  g.fillStyle = "#101418";
  g.fillRect(0, 0, w, h);
  g.strokeStyle = "#1f2a33";
  g.lineWidth = 1;
  for (let i = -32; i <= 32; i += 4) {
    const [ax, ay] = toScreen(i, -32);
    const [bx, by] = toScreen(i, 32);
    g.beginPath();
    g.moveTo(ax, ay);
    g.lineTo(bx, by);
    g.stroke();
    const [cx, cy] = toScreen(-32, i);
    const [dx, dy] = toScreen(32, i);
    g.beginPath();
    g.moveTo(cx, cy);
    g.lineTo(dx, dy);
    g.stroke();
  }
  g.strokeStyle = "#3d5366";
  g.lineWidth = 2;
  const [x0, y0] = toScreen(-32, 32);
  g.strokeRect(x0, y0, 64 * scale, 64 * scale);

  // Props, and a line to whoever holds one.
  for (const p of client.propList()) {
    if (!p.record) continue;
    const q = positionM(p.record.pose);
    const [sx, sy] = toScreen(q[0], q[2]);
    g.fillStyle = p.holderEntity ? "#ef476f" : "#06d6a0";
    g.fillRect(sx - 5, sy - 5, 10, 10);
    if (p.holderEntity) {
      const holder = p.holderEntity === client.entityId ? own?.position : shown.find((a) => a.entityId === p.holderEntity)?.rendered.position;
      if (holder) {
        const [hx, hy] = toScreen(holder[0], holder[2]);
        g.strokeStyle = "#ef476f";
        g.beginPath();
        g.moveTo(sx, sy);
        g.lineTo(hx, hy);
        g.stroke();
      }
    }
  }
  const avatar = (x: number, z: number, yaw: number, label: string, me: boolean) => {
    const [sx, sy] = toScreen(x, z);
    g.fillStyle = me ? "#ffd166" : "#118ab2";
    g.beginPath();
    g.arc(sx, sy, 8, 0, Math.PI * 2);
    g.fill();
    const r = (yaw * Math.PI) / 180;
    g.strokeStyle = "#dde3ea";
    g.lineWidth = 2;
    g.beginPath();
    g.moveTo(sx, sy);
    g.lineTo(sx + Math.sin(r) * 12, sy - Math.cos(r) * 12);
    g.stroke();
    g.fillStyle = "#dde3ea";
    g.font = "12px system-ui, sans-serif";
    g.textAlign = "center";
    g.fillText(label, sx, sy - 13);
  };
  for (const a of shown) avatar(a.rendered.position[0], a.rendered.position[2], a.rendered.yawDeg, a.name || a.wallet || `#${a.entityId}`, false);
  if (own) avatar(own.position[0], own.position[2], own.yawDeg, name, true);
}

function panel(): void {
  const s = client.stats();
  const rows: [string, string][] = [
    ["down", `${(s.bytesDownPerS / 1000).toFixed(1)} kB/s`],
    ["up", `${(s.bytesUpPerS / 1000).toFixed(2)} kB/s`],
    ["frames", `${s.framesPerS}/s`],
    ["decode", `${(s.decodeMsPerFrame * 1000).toFixed(0)} µs/frame`],
    ["RTT", Number.isFinite(s.rttMs) ? `${s.rttMs.toFixed(1)} ms` : "–"],
    ["resyncs", String(s.resyncs)],
    ["reconnects", String(s.reconnects)],
  ];
  $("stats").innerHTML = rows.map(([k, v]) => `<tr><td>${k}</td><td>${v}</td></tr>`).join("");
  const li = (text: string, me = false) => {
    const e = document.createElement("li");
    e.textContent = text;
    if (me) e.className = "me";
    return e;
  };
  $("avatars").replaceChildren(li(`${name} (you)`, true), ...shown.map((a) => li(a.name || a.wallet || `#${a.entityId}`)));
  $("props").replaceChildren(...client.propList().map((p) => li(`prop ${p.propId}${p.holderEntity ? ` · held by ${who(p.holderEntity)}` : ""}`)));
}

function frame(now: number): void {
  step(now);
  shown = replicas.render(now);
  draw();
  schedule();
}

/**
 * Animation frames while visible; a 60 Hz timer while hidden (browsers pause hidden frames).
 * One loop at a time: a callback of an older schedule does nothing.
 */
let loop = 0;
function schedule(): void {
  const mine = ++loop;
  const run = (now: number) => {
    if (mine === loop) frame(now);
  };
  if (document.hidden) setTimeout(() => run(performance.now()), 16);
  else requestAnimationFrame(run);
}
document.addEventListener("visibilitychange", schedule);
setInterval(panel, 500);
schedule();
client.connect();

// For the browser test and for people poking at it in the console.
(window as unknown as { plazaViewer: unknown }).plazaViewer = {
  client,
  replicas,
  name,
  own: () => own,
  shown: () => shown,
};
