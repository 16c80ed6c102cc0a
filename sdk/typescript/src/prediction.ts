/**
 * Own-avatar prediction and prop pickup prediction (seed 004's Tier-2 model).
 *
 * Prediction here is deliberately light, as the seed has it: no rollback and no input replay.
 *
 * * {@link OwnPredictor}: the own avatar is drawn where the local controller put it, at once. The
 *   server's own state in each frame names the last input it folded in; if the server put the
 *   avatar somewhere else than the prediction for that input (a wall, the ground), the shown pose
 *   is shifted by the difference (a rebase, not a replay). A `Correction` (a refused move) snaps
 *   to the server's position and drops the inputs after it.
 * * {@link PropPredictor}: a real Rapier world (`@dimforge/rapier3d-compat`, the WebAssembly build
 *   of the engine the server runs) with gravity, a fixed floor and one body per prop. A local grab
 *   puts the prop in hand at once; the server's answer (a `PropEvent` naming this client's
 *   avatar as the holder, or a refusal) confirms or undoes it. The room applies an input at its
 *   next tick and sends the answer on the same ordered stream ahead of every later snapshot
 *   frame, so the drawn holder can differ from the server's word for at most one snapshot frame:
 *   the one already on its way when the grab was sent (the seed's assertion).
 *   {@link PropPredictor.serverFrame} counts it in {@link PropPredictor.maxVisibleMispredictionFrames}.
 *
 * Call {@link initPhysics} once (it loads the WebAssembly module) before
 * {@link PropPredictor.create}.
 */
import RAPIER from "@dimforge/rapier3d-compat";

import type { OwnState } from "./frame.js";
import type * as pb from "./gen/plaza/v1/client_pb.js";
import type { Pose, Vec3 } from "./quant.js";

/** Where the server holds a prop relative to its holder's feet (plaza-physics' default `hold_offset`). */
export const DEFAULT_HOLD_OFFSET: Vec3 = [0, 1.2, 0.5];

/** Inputs kept for reconciliation at most; older ones are dropped (the server folded them in long ago). */
export const MAX_PENDING_INPUTS = 128;

/** A server pose within this distance (m) of the prediction is "the same" (quantization, contact offsets). */
export const RECONCILE_TOLERANCE_M = 0.01;

function f32(bits: number): number {
  const b = new DataView(new ArrayBuffer(4));
  b.setUint32(0, bits >>> 0, true);
  return b.getFloat32(0, true);
}

function sub(a: Vec3, b: Vec3): Vec3 {
  return [a[0] - b[0], a[1] - b[1], a[2] - b[2]];
}

function add(a: Vec3, b: Vec3): Vec3 {
  return [a[0] + b[0], a[1] + b[1], a[2] + b[2]];
}

function len(a: Vec3): number {
  return Math.hypot(a[0], a[1], a[2]);
}

function finite(a: Vec3): boolean {
  return a.every((x) => Number.isFinite(x));
}

/** The own avatar: shown where the local controller put it; reconciled with the server's answers. */
export class OwnPredictor {
  private pending: { seq: number; position: Vec3 }[] = [];
  private shownPose: Pose | null = null;
  /** Rebases applied (the server disagreed with a prediction beyond the tolerance). */
  rebases = 0;
  /** Snaps applied (corrections). */
  snaps = 0;

  /**
   * A move the local controller made, sent with envelope sequence `seq` (what
   * `PlazaClient.move` returned; 0 when it was not sent). It is shown at once.
   */
  local(seq: number, pose: Pose): void {
    if (!finite(pose.position)) return;
    this.shownPose = { ...pose, position: [...pose.position] as Vec3 };
    if (seq > 0) {
      this.pending.push({ seq, position: [...pose.position] as Vec3 });
      if (this.pending.length > MAX_PENDING_INPUTS) this.pending.splice(0, this.pending.length - MAX_PENDING_INPUTS);
    }
  }

  /** The pose to draw for the own avatar (null before the first move). */
  pose(): Pose | null {
    return this.shownPose;
  }

  /** Inputs sent and not yet folded in by the server. */
  pendingCount(): number {
    return this.pending.length;
  }

  /**
   * The server's own state from a frame. Inputs up to `lastInputSeq` are done; if the server's
   * position differs from what was predicted for that input by more than the tolerance, the
   * shown pose moves by the difference (the later inputs keep their relative motion). Returns
   * the difference (m) that was found, 0 when none.
   */
  serverOwn(own: OwnState): number {
    const server: Vec3 = [f32(own.bits[0]!), f32(own.bits[1]!), f32(own.bits[2]!)];
    if (!finite(server)) return 0;
    let predicted: Vec3 | null = null;
    while (this.pending.length > 0 && seqLe(this.pending[0]!.seq, own.lastInputSeq)) {
      predicted = this.pending.shift()!.position;
    }
    if (!predicted) return 0;
    const d = sub(server, predicted);
    const off = len(d);
    if (off <= RECONCILE_TOLERANCE_M || !this.shownPose) return off;
    this.rebases += 1;
    this.shownPose = { ...this.shownPose, position: add(this.shownPose.position, d) };
    for (const p of this.pending) p.position = add(p.position, d);
    return off;
  }

  /**
   * The server refused a move: the avatar snaps to the server's position and the inputs after
   * the refused one are dropped (they were predicted from a place the avatar never reached).
   * Returns the pose the local controller continues from.
   */
  correction(c: pb.Correction): Pose {
    const p = c.position;
    const at: Vec3 = p ? [p.x, p.y, p.z] : (this.shownPose?.position ?? [0, 0, 0]);
    const v = c.velocity;
    this.snaps += 1;
    this.pending = [];
    const base = this.shownPose ?? { position: at, velocity: [0, 0, 0], yawDeg: 0, movementKind: 0, animFlags: 0, head: null, pointAt: null };
    this.shownPose = { ...base, position: finite(at) ? at : base.position, velocity: v ? [v.x, v.y, v.z] : [0, 0, 0], yawDeg: c.rotationY };
    return this.shownPose;
  }
}

/** Envelope sequences are u32 and wrap: `a` at or before `b`. */
function seqLe(a: number, b: number): boolean {
  return ((b - a) >>> 0) < 0x8000_0000;
}

let physicsReady: Promise<void> | null = null;

/** Loads Rapier's WebAssembly module (once; later calls share the first). */
export function initPhysics(): Promise<void> {
  physicsReady ??= RAPIER.init();
  return physicsReady;
}

/** Options of {@link PropPredictor}. */
export interface PropPredictorOptions {
  /** Fixed step of the predicted world, seconds (default 1/60: one render frame). */
  dtS?: number;
  /** Where a held prop sits relative to the holder's feet (default {@link DEFAULT_HOLD_OFFSET}). */
  holdOffset?: Vec3;
  /** Height of the floor's top surface (default 0). */
  floorY?: number;
  /** Half extent of a prop's box collider, metres (default 0.15). */
  propHalfExtent?: number;
}

/** What to draw for a prop. */
export interface PropView {
  propId: number;
  position: Vec3;
  /** In this client's hand (predicted or confirmed). */
  heldByMe: boolean;
  /** A grab is predicted and not answered yet. */
  predicting: boolean;
  /** The drawn holder differs from the server's last word. */
  mispredicted: boolean;
}

interface PropState {
  body: RAPIER.RigidBody;
  /** Server truth: the prop's position from the frames and its holder from the prop events. */
  serverPosition: Vec3;
  serverHolder: number;
  /** A grab this client predicted: the request's sequence, and frames it has been unanswered. */
  grab: { seq: number; frames: number } | null;
  /** Snapshot frames in a row the drawn holder has differed from the server's. */
  mispredictedRun: number;
}

/** Prop pickup prediction in a local Rapier world, reconciled with the server's answers. */
export class PropPredictor {
  private readonly world: RAPIER.World;
  private readonly props = new Map<number, PropState>();
  private readonly holdOffset: Vec3;
  private readonly half: number;
  private ownEntity = 0;
  private ownFeet: Vec3 = [0, 0, 0];
  /** The longest run of snapshot frames in which a prop was drawn with a holder the server had not confirmed. */
  maxVisibleMispredictionFrames = 0;
  /** Predicted grabs the server refused. */
  undone = 0;
  /** Frames stepped. */
  frame = 0;

  private constructor(opts: PropPredictorOptions) {
    this.world = new RAPIER.World({ x: 0, y: -9.81, z: 0 });
    this.world.timestep = opts.dtS ?? 1 / 60;
    this.holdOffset = opts.holdOffset ?? DEFAULT_HOLD_OFFSET;
    this.half = opts.propHalfExtent ?? 0.15;
    const floorY = opts.floorY ?? 0;
    const floor = this.world.createRigidBody(RAPIER.RigidBodyDesc.fixed().setTranslation(0, floorY - 0.5, 0));
    this.world.createCollider(RAPIER.ColliderDesc.cuboid(1000, 0.5, 1000), floor);
  }

  /** A predictor with its own Rapier world (loads the WebAssembly module on first use). */
  static async create(opts: PropPredictorOptions = {}): Promise<PropPredictor> {
    await initPhysics();
    return new PropPredictor(opts);
  }

  /** Frees the Rapier world. */
  free(): void {
    this.world.free();
  }

  /** This client's avatar entity (from `Joined`). */
  setOwnEntity(entity: number): void {
    this.ownEntity = entity;
  }

  private state(propId: number, at?: Vec3): PropState {
    let s = this.props.get(propId);
    if (!s) {
      const p = at ?? [0, 0, 0];
      const body = this.world.createRigidBody(RAPIER.RigidBodyDesc.kinematicPositionBased().setTranslation(p[0], p[1], p[2]));
      this.world.createCollider(RAPIER.ColliderDesc.cuboid(this.half, this.half, this.half), body);
      s = { body, serverPosition: [...p] as Vec3, serverHolder: 0, grab: null, mispredictedRun: 0 };
      this.props.set(propId, s);
    }
    return s;
  }

  /** The prop's position as the server's frames carry it. */
  serverPose(propId: number, position: Vec3): void {
    if (!finite(position)) return;
    this.state(propId, position).serverPosition = [...position] as Vec3;
  }

  /** The server's prop event: who holds the prop now. Confirms or undoes a predicted grab. */
  serverEvent(ev: pb.PropEvent): void {
    const s = this.state(ev.propId, ev.position ? [ev.position.x, ev.position.y, ev.position.z] : undefined);
    s.serverHolder = ev.holderEntity;
    if (ev.position) s.serverPosition = [ev.position.x, ev.position.y, ev.position.z];
    if (s.grab && ev.holderEntity !== 0) {
      // Answered: ours (confirmed) or someone else's (the prediction lost the race).
      if (ev.holderEntity !== this.ownEntity) this.undone += 1;
      s.grab = null;
    }
  }

  /** The server refused request `seq` (a `RequestRejected` or an error naming it). */
  refused(seq: number): void {
    for (const s of this.props.values()) {
      if (s.grab?.seq === seq) {
        s.grab = null;
        this.undone += 1;
      }
    }
  }

  /**
   * The local player grabs `propId` with request sequence `seq` (what `PlazaClient.interact`
   * returned). False, and nothing predicted, when the server already says someone holds it.
   */
  grab(propId: number, seq: number): boolean {
    const s = this.state(propId);
    if (s.serverHolder !== 0 && s.serverHolder !== this.ownEntity) return false;
    s.grab = { seq, frames: 0 };
    this.place(s, true);
    return true;
  }

  private heldByMe(s: PropState): boolean {
    return s.grab !== null || (this.ownEntity !== 0 && s.serverHolder === this.ownEntity);
  }

  private place(s: PropState, held: boolean): void {
    const p = held ? add(this.ownFeet, this.holdOffset) : s.serverPosition;
    s.body.setNextKinematicTranslation({ x: p[0], y: p[1], z: p[2] });
    // The first frame of a grab shows the prop in hand already (no one-step lag of a kinematic body).
    if (held && s.grab?.frames === 0) s.body.setTranslation({ x: p[0], y: p[1], z: p[2] }, true);
  }

  /**
   * One frame: the own avatar's feet are at `ownFeet`; props held by this client follow the hand,
   * the others follow the server. Returns the views to draw.
   */
  step(ownFeet: Vec3): PropView[] {
    if (finite(ownFeet)) this.ownFeet = [...ownFeet] as Vec3;
    for (const s of this.props.values()) this.place(s, this.heldByMe(s));
    this.world.step();
    this.frame += 1;
    const out: PropView[] = [];
    for (const [propId, s] of this.props) {
      if (s.grab) s.grab.frames += 1;
      out.push(this.viewOf(propId, s));
    }
    return out;
  }

  /**
   * A snapshot frame arrived (call it after the events that came before it): every prop drawn
   * with a holder the server has not confirmed counts one frame of visible misprediction.
   */
  serverFrame(): void {
    for (const s of this.props.values()) {
      s.mispredictedRun = this.mispredicted(s) ? s.mispredictedRun + 1 : 0;
      this.maxVisibleMispredictionFrames = Math.max(this.maxVisibleMispredictionFrames, s.mispredictedRun);
    }
  }

  private mispredicted(s: PropState): boolean {
    const serverMine = this.ownEntity !== 0 && s.serverHolder === this.ownEntity;
    return this.heldByMe(s) !== serverMine;
  }

  private viewOf(propId: number, s: PropState): PropView {
    const t = s.body.translation();
    return { propId, position: [t.x, t.y, t.z], heldByMe: this.heldByMe(s), predicting: s.grab !== null, mispredicted: this.mispredicted(s) };
  }

  /** The view of one prop after the last step (undefined for an unknown prop). */
  view(propId: number): PropView | undefined {
    const s = this.props.get(propId);
    return s && this.viewOf(propId, s);
  }
}
