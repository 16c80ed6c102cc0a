// Random frame streams of the Rust encoder (fixtures/frames/random.json, what seed 1 makes; CI
// also writes a fresh seed's streams and points PLAZA_RANDOM_FRAMES at them): the TypeScript
// decoder must make of every frame exactly what the Rust decoder made — the same changed and
// removed ids, the same check of everything held, the same final records and own state — and
// reach the same verdict on every frame with a flipped bit.
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";

import { fixture } from "./fixtures.js";
import { checkStream, type RandomFrames } from "./streams.js";

const sources: [string, RandomFrames][] = [["committed seed 1", fixture<RandomFrames>("frames/random.json")]];
const fresh = process.env.PLAZA_RANDOM_FRAMES;
if (fresh) sources.push([`fresh (${fresh})`, JSON.parse(readFileSync(fresh, "utf8")) as RandomFrames]);

describe.each(sources)("Rust-encoded random frames: %s", (_name, data) => {
  it("has streams with frames, probes and entities", () => {
    const frames = data.streams.flatMap((s) => s.frames);
    expect(frames.length).toBeGreaterThan(50);
    expect(frames.filter((f) => f.probe).length).toBeGreaterThan(10);
    expect(frames.filter((f) => f.checked).length).toBeGreaterThan(5);
    expect(Math.max(...frames.map((f) => f.held))).toBeGreaterThan(10);
  });

  it.each(data.streams.map((s, i) => [i, s] as const))("stream %i decodes as in Rust", (_i, stream) => {
    checkStream(stream);
  });
});
