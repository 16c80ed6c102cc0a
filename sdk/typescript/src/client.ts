/**
 * Connection management and the room as a client sees it.
 *
 * {@link PlazaClient} opens the WebSocket, negotiates (version 1.0, guest or token auth, the
 * resume token of an earlier connection), joins the room, applies every snapshot frame to a
 * {@link FrameDecoder} (asking for `Resync` on a chain break, a check mismatch or a decode error),
 * keeps the avatars, props, consents and roster it learned, and reconnects after a retryable
 * close with exponential backoff and jitter, resuming the session with its token.
 *
 * Collection callbacks (`onAvatarEnter`, `onProp`, `onConsent`, `onRoster`, …) first replay
 * what already exists, then report changes; each returns its unsubscribe function.
 *
 * Not here: smoothing of remote avatars (`smoothing.ts`), own-avatar and prop pickup prediction
 * (`prediction.ts`, its own entry point `@plaza/sdk/prediction`: it loads Rapier's WebAssembly build).
 */
import { create, fromBinary, toBinary, type MessageInitShape } from "@bufbuild/protobuf";

import { Emitter } from "./events.js";
import { FrameError } from "./errors.js";
import { FrameDecoder, KIND_AVATAR, KIND_PROP, PROP_ENTITY_BASE, type DecodedFrame, type EntityRecord, type OwnState } from "./frame.js";
import { Backoff, classifyClose, LinkConditioner, StatsMeter, type CloseInfo, type LinkConditionerOptions, type NetStats } from "./net.js";
import type { Pose } from "./quant.js";
import { CompressedSender } from "./compressed.js";
import * as pb from "./gen/plaza/v1/client_pb.js";

/** The protocol versions this SDK speaks. */
export const PROTOCOL_VERSIONS = [{ major: 1, minor: 0 }];

/** The part of the WebSocket API the client uses (browsers' `WebSocket`, Node's `ws`). */
export interface WebSocketLike {
  binaryType: string;
  readonly readyState: number;
  send(data: Uint8Array): void;
  close(code?: number, reason?: string): void;
  onopen: ((ev: unknown) => void) | null;
  onmessage: ((ev: { data: unknown }) => void) | null;
  onclose: ((ev: { code: number; reason: string }) => void) | null;
  onerror: ((ev: unknown) => void) | null;
}
export type WebSocketFactory = (url: string) => WebSocketLike;

export interface PlazaClientOptions {
  /** The gateway's WebSocket URL, e.g. `ws://127.0.0.1:7777/v1/ws`. */
  url: string;
  /** The room to join. */
  room: string;
  /** `""` for a generated guest, `guest:<name>` for a named guest, or a token. */
  authToken?: string;
  /** Free-form client name for the server's logs. */
  clientName?: string;
  /** How to open a socket (default: the global `WebSocket`). */
  webSocket?: WebSocketFactory;
  /** Reconnect backoff: first delay and cap, ms (defaults 250 and 10,000). */
  backoff?: { baseMs?: number; maxMs?: number };
  /** Give up after this many failed reconnects in a row (default: never). */
  maxReconnects?: number;
  /** Added latency and jitter in both directions, for development. */
  conditioner?: LinkConditionerOptions;
  /** Ping period, ms (default 1,000). */
  pingEveryMs?: number;
  /** Send `MovementCompressed` (160 bits) instead of the float `Movement`. */
  compressedMovement?: boolean;
  /** Clock in ms (default `performance.now`). */
  now?: () => number;
  /** Randomness for the backoff jitter. */
  random?: () => number;
}

/** The connection's state. */
export type ConnectionState = "connecting" | "negotiating" | "joining" | "joined" | "reconnecting" | "closed";

/** An avatar in the room (a record of kind 0), with its identity when the roster named it. */
export interface Avatar {
  entityId: number;
  record: EntityRecord;
  /** The tick the held pose was measured at. */
  poseTick: number;
  wallet?: string;
  name?: string;
}

/** A prop: its pose from the frames, its holder from the prop events. */
export interface Prop {
  propId: number;
  entityId: number;
  record?: EntityRecord;
  /** 0 when nobody holds it. */
  holderEntity: number;
  revision: bigint;
}

/** Who an entity is (the roster). */
export interface RosterEntry {
  entityId: number;
  wallet: string;
  name: string;
}

/** A frame as it arrived, for smoothing and stats. */
export interface FrameArrival {
  frame: DecodedFrame;
  /** Local clock (ms) when it arrived. */
  at: number;
  /** The room's tick rate. */
  tickHz: number;
}

export interface PlazaEvents {
  state: ConnectionState;
  negotiated: pb.Negotiated;
  joined: pb.Joined;
  frame: FrameArrival;
  avatarEnter: Avatar;
  avatarLeave: Avatar;
  avatarUpdate: Avatar;
  prop: Prop;
  consent: pb.ConsentEvent;
  emote: pb.EmoteEvent;
  expression: pb.ExpressionState;
  /** The server moved an avatar (its next record snaps). */
  teleported: pb.Teleported;
  roster: RosterEntry;
  correction: pb.Correction;
  rejected: pb.RequestRejected;
  event: pb.Event;
  serverError: pb.Error;
  own: OwnState | null;
  /** The room is moving to another node (the client keeps its state and waits). */
  roomMoving: { reason: string };
  /** The room is back after a move (a keyframe follows). */
  roomBack: { reason: string };
  /** A close; `willRetry` tells whether the client reconnects. */
  close: CloseInfo & { willRetry: boolean; reason: string };
  /** A snapshot frame failed to decode; the client asked for a keyframe. */
  resync: { error: FrameError };
  stats: NetStats;
}

const OPEN = 1;

/** A client of one room. */
export class PlazaClient {
  readonly opts: PlazaClientOptions;
  readonly decoder = new FrameDecoder();
  private readonly emitter = new Emitter<PlazaEvents>();
  private readonly now: () => number;
  private readonly backoff: Backoff;
  private readonly meter: StatsMeter;
  private ws: WebSocketLike | null = null;
  private sendLink: LinkConditioner<Uint8Array> | null = null;
  private recvLink: LinkConditioner<Uint8Array> | null = null;
  private stateValue: ConnectionState = "connecting";
  private seq = 0;
  private sessionIdValue = 0n;
  private resumeToken = "";
  private walletValue = "";
  private joinedValue: pb.Joined | null = null;
  private wantClose = false;
  private resyncPendingSince = -Infinity;
  private pingTimer: ReturnType<typeof setInterval> | null = null;
  private reconnectTimer: ReturnType<typeof setTimeout> | null = null;
  private readonly avatars = new Map<number, Avatar>();
  private readonly props = new Map<number, Prop>();
  private readonly consents = new Map<bigint, pb.ConsentEvent>();
  private readonly roster = new Map<number, RosterEntry>();
  private readonly expressions = new Map<number, pb.ExpressionState>();
  private readonly pings = new Map<bigint, number>();
  private moveSeq = 0;
  private firstMove = true;
  private readonly compressedSender = new CompressedSender();
  private clockStart: number;

  constructor(opts: PlazaClientOptions) {
    this.opts = opts;
    this.now = opts.now ?? (() => performance.now());
    this.clockStart = this.now();
    this.backoff = new Backoff(opts.backoff?.baseMs, opts.backoff?.maxMs, opts.random);
    this.meter = new StatsMeter(this.now);
    if (opts.conditioner) {
      this.sendLink = new LinkConditioner(opts.conditioner, (b) => this.rawSend(b), this.now, opts.random);
      this.recvLink = new LinkConditioner(opts.conditioner, (b) => this.onBytes(b), this.now, opts.random);
    }
  }

  /** Opens the connection (and keeps it open until {@link close}). */
  connect(): this {
    this.wantClose = false;
    this.open();
    return this;
  }

  /** Leaves and closes for good. */
  close(): void {
    this.wantClose = true;
    if (this.reconnectTimer) clearTimeout(this.reconnectTimer);
    this.stopPing();
    if (this.ws && this.ws.readyState === OPEN) {
      this.send({ case: "leave", value: {} });
      this.ws.close(1000, "client closed");
    }
    this.setState("closed");
  }

  // === State ===

  get state(): ConnectionState {
    return this.stateValue;
  }

  get sessionId(): bigint {
    return this.sessionIdValue;
  }

  get wallet(): string {
    return this.walletValue;
  }

  get joined(): pb.Joined | null {
    return this.joinedValue;
  }

  /** This client's own avatar entity (0 before joining). */
  get entityId(): number {
    return this.joinedValue?.entityId ?? 0;
  }

  /** The room's broadcast period in seconds (the sample interval of remote poses). */
  get sampleIntervalS(): number {
    return 1 / (this.joinedValue?.broadcastHz || 20);
  }

  get tickHz(): number {
    return this.joinedValue?.tickHz || 50;
  }

  stats(): NetStats {
    return this.meter.snapshot();
  }

  /** The avatar with this entity id, if in view. */
  avatar(entityId: number): Avatar | undefined {
    return this.avatars.get(entityId);
  }

  avatarList(): Avatar[] {
    return [...this.avatars.values()];
  }

  propList(): Prop[] {
    return [...this.props.values()];
  }

  consentList(): pb.ConsentEvent[] {
    return [...this.consents.values()];
  }

  rosterList(): RosterEntry[] {
    return [...this.roster.values()];
  }

  // === Events ===

  on<K extends keyof PlazaEvents>(event: K, fn: (v: PlazaEvents[K]) => void): () => void {
    return this.emitter.on(event, fn);
  }

  once<K extends keyof PlazaEvents>(event: K, fn: (v: PlazaEvents[K]) => void): () => void {
    return this.emitter.once(event, fn);
  }

  /** Every avatar present now, then every one that arrives. */
  onAvatarEnter(fn: (a: Avatar) => void): () => void {
    const off = this.on("avatarEnter", fn);
    for (const a of this.avatars.values()) fn(a);
    return off;
  }

  onAvatarLeave(fn: (a: Avatar) => void): () => void {
    return this.on("avatarLeave", fn);
  }

  /** Every avatar's current state now, then every change. */
  onAvatarUpdate(fn: (a: Avatar) => void): () => void {
    const off = this.on("avatarUpdate", fn);
    for (const a of this.avatars.values()) fn(a);
    return off;
  }

  /** Every prop known now, then every change (pose or holder). */
  onProp(fn: (p: Prop) => void): () => void {
    const off = this.on("prop", fn);
    for (const p of this.props.values()) fn(p);
    return off;
  }

  /** Every open consent now, then every transition. */
  onConsent(fn: (c: pb.ConsentEvent) => void): () => void {
    const off = this.on("consent", fn);
    for (const c of this.consents.values()) fn(c);
    return off;
  }

  onEmote(fn: (e: pb.EmoteEvent) => void): () => void {
    return this.on("emote", fn);
  }

  /** Every non-neutral expression held now, then every change. */
  onExpression(fn: (e: pb.ExpressionState) => void): () => void {
    const off = this.on("expression", fn);
    for (const e of this.expressions.values()) fn(e);
    return off;
  }

  /** Announces this member's display name (the roster carries it to the others). */
  announce(displayName: string, version = 1n): number {
    return this.send({ case: "profile", value: { version, displayName } });
  }

  /** Sets this avatar's expression (id 0 = neutral; intensity in basis points). */
  expression(expressionId: number, intensityBp: number): number {
    return this.send({ case: "expression", value: { expressionId, intensityBp } });
  }

  /** Every roster entry known now, then every new or changed one. */
  onRoster(fn: (r: RosterEntry) => void): () => void {
    const off = this.on("roster", fn);
    for (const r of this.roster.values()) fn(r);
    return off;
  }

  // === Sending ===

  /**
   * Sends the own avatar's pose (the caller paces it: see `MovementPacer`). The first move after
   * a join goes as `is_instant` (a placement at the spawn point).
   */
  move(pose: Pose, opts: { instant?: boolean } = {}): number {
    if (this.stateValue !== "joined") return 0;
    const timestamp = (this.now() - this.clockStart) / 1000;
    const instant = this.firstMove || !!opts.instant;
    this.firstMove = false;
    this.moveSeq = this.seq + 1;
    if (this.opts.compressedMovement) {
      // The tier from the distance over the time since the last compressed move (seed 000);
      // the instant bit travels in the compressed form too.
      const { compressed } = this.compressedSender.encode(pose, timestamp, { instant });
      this.send({ case: "movementCompressed", value: compressed });
    } else {
      this.send({
        case: "movement",
        value: {
          position: vec3(pose.position),
          velocity: vec3(pose.velocity),
          rotationY: pose.yawDeg,
          movementKind: pose.movementKind,
          animFlags: pose.animFlags,
          headIkYawEnabled: pose.head !== null,
          headIkPitchEnabled: pose.head !== null,
          headYaw: pose.head?.[0] ?? 0,
          headPitch: pose.head?.[1] ?? 0,
          isPointingAt: pose.pointAt !== null,
          pointAt: pose.pointAt ? vec3(pose.pointAt) : undefined,
          isInstant: instant,
          timestamp,
        },
      });
    }
    return this.moveSeq;
  }

  /** Picks a prop up, places it (at `position`) or throws it (with `velocity`). */
  interact(kind: pb.InteractionKind, propId: number, position?: [number, number, number], velocity?: [number, number, number]): number {
    return this.send({
      case: "interaction",
      value: { kind, propId, position: position && vec3(position), velocity: velocity && vec3(velocity) },
    });
  }

  /** Consent operations: request (kind + target), consent/decline/activate/release/cancel (id). */
  consent(op: pb.ConsentOp, args: { kind?: string; targetEntity?: number; consentId?: bigint }): number {
    return this.send({ case: "consent", value: { op, kind: args.kind ?? "", targetEntity: args.targetEntity ?? 0, consentId: args.consentId ?? 0n } });
  }

  emote(emoteId: string, stop = false): number {
    return this.send({ case: "emote", value: { emoteId, stop, timestampMs: BigInt(Date.now()) } });
  }

  /** Sends one client envelope; returns its sequence number (0 when not connected). */
  send(body: MessageInitShape<typeof pb.ClientEnvelopeSchema>["body"]): number {
    if (!this.ws || this.ws.readyState !== OPEN) return 0;
    this.seq += 1;
    const env = create(pb.ClientEnvelopeSchema, {
      sessionId: this.sessionIdValue,
      sequence: this.seq,
      sentAtMs: BigInt(Date.now()),
      body,
    });
    const bytes = toBinary(pb.ClientEnvelopeSchema, env);
    if (this.sendLink) this.sendLink.push(bytes);
    else this.rawSend(bytes);
    return this.seq;
  }

  private rawSend(bytes: Uint8Array): void {
    if (!this.ws || this.ws.readyState !== OPEN) return;
    this.meter.up(bytes.length);
    this.ws.send(bytes);
  }

  // === Connection ===

  private open(): void {
    const factory: WebSocketFactory = this.opts.webSocket ?? ((url) => new (globalThis as unknown as { WebSocket: new (u: string) => WebSocketLike }).WebSocket(url));
    this.setState(this.stateValue === "reconnecting" ? "reconnecting" : "connecting");
    const ws = factory(this.opts.url);
    this.ws = ws;
    ws.binaryType = "arraybuffer";
    ws.onopen = () => {
      if (this.ws !== ws) return;
      this.setState("negotiating");
      this.seq = 0;
      this.send({
        case: "negotiate",
        value: { versions: PROTOCOL_VERSIONS, authToken: this.opts.authToken ?? "", resumeToken: this.resumeToken, clientName: this.opts.clientName ?? "plaza-ts" },
      });
    };
    ws.onmessage = (ev) => {
      if (this.ws !== ws) return;
      const bytes = toBytes(ev.data);
      if (!bytes) return;
      this.meter.down(bytes.length);
      if (this.recvLink) this.recvLink.push(bytes);
      else this.onBytes(bytes);
    };
    ws.onerror = () => {};
    ws.onclose = (ev) => {
      if (this.ws !== ws) return;
      this.ws = null;
      this.onClosed(ev.code, ev.reason);
    };
  }

  private onClosed(code: number, reason: string): void {
    this.stopPing();
    const info = classifyClose(code);
    const exhausted = this.opts.maxReconnects !== undefined && this.backoff.attempts >= this.opts.maxReconnects;
    const willRetry = !this.wantClose && info.retryable && !exhausted;
    this.emitter.emit("close", { ...info, willRetry, reason });
    if (!willRetry) {
      this.setState("closed");
      return;
    }
    this.setState("reconnecting");
    this.meter.reconnects += 1;
    const delay = this.backoff.next();
    this.reconnectTimer = setTimeout(() => {
      this.reconnectTimer = null;
      if (!this.wantClose) this.open();
    }, delay);
  }

  private setState(s: ConnectionState): void {
    if (this.stateValue === s) return;
    this.stateValue = s;
    this.emitter.emit("state", s);
  }

  private startPing(): void {
    this.stopPing();
    this.pingTimer = setInterval(() => {
      const t = BigInt(Math.round(this.now() * 1000));
      this.pings.set(t, this.now());
      if (this.pings.size > 16) this.pings.delete(this.pings.keys().next().value!);
      this.send({ case: "ping", value: { clientTimeMs: t } });
      this.emitter.emit("stats", this.stats());
    }, this.opts.pingEveryMs ?? 1000);
  }

  private stopPing(): void {
    if (this.pingTimer) clearInterval(this.pingTimer);
    this.pingTimer = null;
  }

  // === Receiving ===

  private onBytes(bytes: Uint8Array): void {
    let env: pb.ServerEnvelope;
    try {
      env = fromBinary(pb.ServerEnvelopeSchema, bytes);
    } catch {
      // A server envelope we cannot read: treat like a bad frame (the state stays).
      this.meter.decodeErrors += 1;
      return;
    }
    const b = env.body;
    switch (b.case) {
      case "negotiated":
        this.onNegotiated(b.value);
        break;
      case "joined":
        this.onJoined(b.value);
        break;
      case "snapshotFrame":
        this.onFrame(b.value.frame);
        break;
      case "pong": {
        const sent = this.pings.get(b.value.clientTimeMs);
        if (sent !== undefined) {
          this.meter.rttMs = this.now() - sent;
          this.pings.delete(b.value.clientTimeMs);
        }
        break;
      }
      case "correction":
        this.emitter.emit("correction", b.value);
        break;
      case "event":
        this.onEvent(b.value);
        break;
      case "error":
        this.emitter.emit("serverError", b.value);
        break;
      case "left":
        this.joinedValue = null;
        break;
      case "expressions":
        if (b.value.full) this.expressions.clear();
        for (const e of b.value.states) {
          if (e.expressionId === 0 && e.intensityBp === 0) this.expressions.delete(e.entityId);
          else this.expressions.set(e.entityId, e);
          this.emitter.emit("expression", e);
        }
        break;
      default:
        this.onOther(env);
    }
  }

  /** Bodies this SDK version may not know yet (added by later protocol versions). */
  private onOther(env: pb.ServerEnvelope): void {
    const body = env.body as { case?: string; value?: unknown };
    if (body.case === "roomMoving" || body.case === "moving") this.emitter.emit("roomMoving", { reason: String((body.value as { reason?: unknown })?.reason ?? "") });
    if (body.case === "roomBack" || body.case === "back") this.emitter.emit("roomBack", { reason: "" });
  }

  private onNegotiated(n: pb.Negotiated): void {
    const resumed = this.sessionIdValue !== 0n && n.sessionId === this.sessionIdValue;
    this.sessionIdValue = n.sessionId;
    this.resumeToken = n.resumeToken;
    this.walletValue = n.wallet;
    this.emitter.emit("negotiated", n);
    this.startPing();
    // A resumed session that was in a room is rejoined by the gateway (Joined follows); a new
    // session joins.
    if (!(resumed && this.joinedValue)) {
      this.setState("joining");
      this.send({ case: "join", value: { roomId: this.opts.room } });
    } else {
      this.setState("joining");
    }
  }

  private onJoined(j: pb.Joined): void {
    const again = this.joinedValue !== null;
    this.joinedValue = j;
    this.firstMove = true;
    this.backoff.reset();
    if (!again) this.clearRoom();
    this.setState("joined");
    this.emitter.emit("joined", j);
  }

  private clearRoom(): void {
    for (const a of this.avatars.values()) this.emitter.emit("avatarLeave", a);
    this.avatars.clear();
    this.props.clear();
    this.consents.clear();
    this.expressions.clear();
    this.decoder.reset();
  }

  private onFrame(frame: Uint8Array): void {
    const t0 = this.now();
    let d: DecodedFrame;
    try {
      d = this.decoder.apply(frame);
    } catch (e) {
      if (!(e instanceof FrameError)) throw e;
      this.meter.decodeErrors += e.kind === "malformed" || e.kind === "truncated" || e.kind === "too_large" ? 1 : 0;
      this.meter.checkFailures += e.kind === "check_mismatch" ? 1 : 0;
      // One resync per break: the deltas that follow fail on the chain until the keyframe.
      if (this.now() - this.resyncPendingSince > 1000) {
        this.resyncPendingSince = this.now();
        this.meter.resyncs += 1;
        const reason =
          e.kind === "chain_break" ? pb.ResyncReason.CHAIN_BREAK : e.kind === "check_mismatch" ? pb.ResyncReason.CHECK_MISMATCH : pb.ResyncReason.DECODE_ERROR;
        this.send({ case: "resync", value: { lastFrameSeq: this.decoder.lastSeq() ?? 0, reason } });
        this.emitter.emit("resync", { error: e });
      }
      return;
    }
    this.meter.frame(this.now() - t0);
    if (d.checked) this.meter.checksPassed += 1;
    if (d.keyframe) this.resyncPendingSince = -Infinity;
    this.applyFrame(d);
    this.emitter.emit("frame", { frame: d, at: t0, tickHz: this.tickHz });
    this.emitter.emit("own", this.decoder.own());
  }

  private applyFrame(d: DecodedFrame): void {
    const own = this.entityId;
    if (d.keyframe) {
      // Forget what is not in the keyframe.
      for (const [id, a] of this.avatars) {
        if (!this.decoder.get(id)) {
          this.avatars.delete(id);
          this.emitter.emit("avatarLeave", a);
        }
      }
    }
    for (const id of d.removed) {
      const a = this.avatars.get(id);
      if (a && !this.decoder.get(id)) {
        this.avatars.delete(id);
        this.emitter.emit("avatarLeave", a);
      }
    }
    for (const id of d.changed) {
      const rec = this.decoder.get(id);
      if (!rec) continue;
      if (rec.kind === KIND_AVATAR && id !== own) {
        const poseTick = this.decoder.poseTick(id) ?? d.tick;
        const prev = this.avatars.get(id);
        const r = this.roster.get(id);
        const a: Avatar = { entityId: id, record: rec, poseTick, wallet: r?.wallet, name: r?.name };
        this.avatars.set(id, a);
        if (!prev || prev.record.generation !== rec.generation) this.emitter.emit("avatarEnter", a);
        else this.emitter.emit("avatarUpdate", a);
      } else if (rec.kind === KIND_PROP) {
        const propId = id - PROP_ENTITY_BASE;
        const p = this.props.get(propId) ?? { propId, entityId: id, holderEntity: 0, revision: 0n };
        p.record = rec;
        this.props.set(propId, p);
        this.emitter.emit("prop", p);
      }
    }
  }

  private onEvent(ev: pb.Event): void {
    this.emitter.emit("event", ev);
    const k = ev.kind;
    switch (k.case) {
      case "prop": {
        const e = k.value;
        const p = this.props.get(e.propId) ?? { propId: e.propId, entityId: PROP_ENTITY_BASE + e.propId, holderEntity: 0, revision: 0n };
        if (e.revision >= p.revision) {
          p.holderEntity = e.holderEntity;
          p.revision = e.revision;
        }
        this.props.set(e.propId, p);
        this.emitter.emit("prop", p);
        break;
      }
      case "consent": {
        const c = k.value;
        if (["released", "declined", "cancelled", "expired"].includes(c.state)) this.consents.delete(c.consentId);
        else this.consents.set(c.consentId, c);
        this.emitter.emit("consent", c);
        break;
      }
      case "emote":
        this.emitter.emit("emote", k.value);
        break;
      case "rejected":
        this.emitter.emit("rejected", k.value);
        break;
      case "roster":
        this.onRosterUpdate(k.value);
        break;
      case "teleported":
        this.emitter.emit("teleported", k.value);
        break;
      default:
        break;
    }
  }

  private onRosterUpdate(u: pb.RosterUpdate): void {
    if (u.full) {
      const keep = new Set(u.upserts.map((e) => e.entityId));
      for (const id of [...this.roster.keys()]) if (!keep.has(id)) this.roster.delete(id);
    }
    for (const id of u.removed) this.roster.delete(id);
    for (const e of u.upserts) this.setRoster({ entityId: e.entityId, wallet: e.wallet, name: e.displayName });
  }

  /** Records who an entity is (from the roster) and tells the listeners. */
  protected setRoster(r: RosterEntry): void {
    this.roster.set(r.entityId, r);
    const a = this.avatars.get(r.entityId);
    if (a) {
      a.wallet = r.wallet;
      a.name = r.name;
      this.emitter.emit("avatarUpdate", a);
    }
    this.emitter.emit("roster", r);
  }
}

function vec3(v: readonly number[]): MessageInitShape<typeof pb.Vec3Schema> {
  return { x: v[0] ?? 0, y: v[1] ?? 0, z: v[2] ?? 0 };
}

function toBytes(data: unknown): Uint8Array | null {
  if (data instanceof ArrayBuffer) return new Uint8Array(data);
  if (ArrayBuffer.isView(data)) return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  if (Array.isArray(data)) {
    // `ws` may hand fragments as an array of Buffers.
    const parts = data as Uint8Array[];
    const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
    let at = 0;
    for (const p of parts) {
      out.set(p, at);
      at += p.length;
    }
    return out;
  }
  return null;
}
