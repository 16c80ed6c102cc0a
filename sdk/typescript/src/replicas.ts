/**
 * The replica directory (seed 003): one {@link Smoother} per remote avatar of a
 * {@link PlazaClient}, fed from its frames and rendered at any local time.
 *
 * A sample's server time is the tick its pose was measured at over the tick rate (a far or
 * deferred avatar's pose is older than the frame); its arrival is the frame's local arrival.
 * An avatar that leaves the view is forgotten (its next sighting snaps).
 */
import type { Avatar, PlazaClient } from "./client.js";
import { positionM, velocityM, yawDeg } from "./quant.js";
import { DEFAULT_SMOOTHING, Smoother, type Rendered, type Sample, type SmoothingConfig } from "./smoothing.js";

/** One remote avatar as shown. */
export interface ShownAvatar {
  entityId: number;
  name?: string;
  wallet?: string;
  rendered: Rendered;
}

export class Replicas {
  private readonly smoothers = new Map<number, Smoother>();
  /** Each avatar's tier for this client, as its last record carried it. */
  private readonly tiers = new Map<number, number>();
  private readonly offs: (() => void)[] = [];
  private readonly cfg: SmoothingConfig;
  /** Entities the server teleported since their last sample (their next sample snaps). */
  private readonly teleported = new Set<number>();

  constructor(
    private readonly client: PlazaClient,
    cfg: Partial<SmoothingConfig> = {},
  ) {
    this.cfg = { ...DEFAULT_SMOOTHING, sendIntervalS: client.sampleIntervalS, ...cfg };
    const now = performance.now();
    for (const a of client.avatarList()) this.sample(a, now);
    this.offs.push(
      client.on("frame", (f) => {
        for (const id of f.frame.changed) {
          const a = client.avatar(id);
          if (a) this.sample(a, f.at);
        }
      }),
    );
    this.offs.push(
      client.onAvatarLeave((a) => {
        this.smoothers.delete(a.entityId);
        this.tiers.delete(a.entityId);
      }),
    );
  }

  /** Marks an entity as moved by the server: its next sample snaps (the Teleported event). */
  markTeleported(entityId: number): void {
    this.teleported.add(entityId);
  }

  private sample(a: Avatar, atMs: number): void {
    let s = this.smoothers.get(a.entityId);
    if (!s) {
      s = new Smoother({ ...this.cfg, sendIntervalS: this.client.sampleIntervalS });
      this.smoothers.set(a.entityId, s);
    }
    // A higher tier sends steady motion every 2^tier-th frame (PROTOCOL.md §2.8): raise the
    // trailing interval now, not one gap late (as `plaza-client`'s replica directory).
    const tier = this.client.decoder.tier(a.entityId) ?? 0;
    const was = this.tiers.get(a.entityId);
    if (was !== undefined && tier > was) s.expectGap(this.client.sampleIntervalS * 2 ** Math.min(tier, 3));
    this.tiers.set(a.entityId, tier);
    const p = a.record.pose;
    const sample: Sample = {
      t: a.poseTick / this.client.tickHz,
      position: positionM(p),
      velocity: velocityM(p),
      yawDeg: yawDeg(p),
      movementKind: p.movementKind,
      animFlags: p.animFlags,
      head: p.head ? [p.head[0], p.head[1]] : null,
      pointAt: p.pointAtMm ? [p.pointAtMm[0] / 1000, p.pointAtMm[1] / 1000, p.pointAtMm[2] / 1000] : null,
      teleport: this.teleported.delete(a.entityId),
    };
    s.push(sample, atMs / 1000);
  }

  /** Every remote avatar's pose for local time `nowMs`. */
  render(nowMs: number): ShownAvatar[] {
    const out: ShownAvatar[] = [];
    const byId = new Map(this.client.avatarList().map((a) => [a.entityId, a]));
    for (const [id, s] of this.smoothers) {
      const r = s.advance(nowMs / 1000);
      if (!r) continue;
      const a = byId.get(id);
      out.push({ entityId: id, name: a?.name, wallet: a?.wallet, rendered: { ...r, position: [...r.position] } });
    }
    return out;
  }

  /** The smoother of one avatar (stats, inbox). */
  smoother(entityId: number): Smoother | undefined {
    return this.smoothers.get(entityId);
  }

  dispose(): void {
    for (const off of this.offs) off();
    this.smoothers.clear();
  }
}
