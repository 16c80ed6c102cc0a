// The committed bindings in src/gen are what `npm run generate` makes of proto/proto today.
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { expect, it } from "vitest";

const PKG = join(dirname(fileURLToPath(import.meta.url)), "..");

it("src/gen is regenerated from the .proto files", () => {
  const out = mkdtempSync(join(tmpdir(), "plaza-gen-"));
  try {
    const r = spawnSync(join(PKG, "node_modules", ".bin", "buf"), ["generate", "--template", "buf.gen.yaml", "-o", out], { cwd: PKG, encoding: "utf8" });
    expect(r.status, r.stderr).toBe(0);
    const rel = join("src", "gen", "plaza", "v1", "client_pb.ts");
    expect(readFileSync(join(out, rel), "utf8"), "run `npm run generate`").toBe(readFileSync(join(PKG, rel), "utf8"));
  } finally {
    rmSync(out, { recursive: true, force: true });
  }
}, 120_000);
