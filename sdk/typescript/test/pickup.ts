// A recorded pickup exchange (fixtures/prediction/pickup.json) and its replay into a PropPredictor.
import { create } from "@bufbuild/protobuf";

import { PropEventSchema } from "../src/gen/plaza/v1/client_pb.js";
import { PropPredictor } from "../src/prediction.js";
import type { Vec3 } from "../src/quant.js";

/** One thing in the exchange, in arrival order, at local time `t` (ms from the start). */
export type RecordedEntry =
  | { t: number; kind: "grab"; propId: number; seq: number }
  | { t: number; kind: "frame" }
  | { t: number; kind: "prop"; propId: number; holderEntity: number; position?: Vec3 }
  | { t: number; kind: "rejected"; inReplyTo: number; reason: string }
  | { t: number; kind: "pose"; propId: number; position: Vec3 };

/** One client's side of an exchange against a real server. */
export interface RecordedExchange {
  /** "accepted" (the grab is confirmed) or "refused" (someone else got the prop first). */
  outcome: "accepted" | "refused";
  ownEntity: number;
  ownFeet: Vec3;
  propId: number;
  entries: RecordedEntry[];
}

export interface ReplayResult {
  predictor: PropPredictor;
  /** The grabbed prop's drawn state at every snapshot frame after the grab. */
  frames: { t: number; heldByMe: boolean; mispredicted: boolean; position: Vec3 }[];
}

/** Feeds a recorded exchange into a fresh predictor in arrival order, stepping it at 60 Hz in between. */
export async function replay(x: RecordedExchange, frameMs = 1000 / 60): Promise<ReplayResult> {
  const predictor = await PropPredictor.create({ dtS: frameMs / 1000 });
  predictor.setOwnEntity(x.ownEntity);
  const frames: ReplayResult["frames"] = [];
  let clock = x.entries[0]?.t ?? 0;
  let grabbed = false;
  for (const e of x.entries) {
    while (clock + frameMs <= e.t) {
      predictor.step(x.ownFeet);
      clock += frameMs;
    }
    switch (e.kind) {
      case "grab":
        grabbed = predictor.grab(e.propId, e.seq);
        break;
      case "frame": {
        predictor.serverFrame();
        const v = predictor.view(x.propId);
        if (grabbed && v) frames.push({ t: e.t, heldByMe: v.heldByMe, mispredicted: v.mispredicted, position: v.position });
        break;
      }
      case "prop":
        predictor.serverEvent(create(PropEventSchema, { propId: e.propId, holderEntity: e.holderEntity, position: e.position && { x: e.position[0], y: e.position[1], z: e.position[2] } }));
        break;
      case "rejected":
        predictor.refused(e.inReplyTo);
        break;
      case "pose":
        predictor.serverPose(e.propId, e.position);
        break;
    }
  }
  return { predictor, frames };
}
