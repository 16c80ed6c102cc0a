// The viewer bundle `plaza up` serves (viewer/dist/viewer.js, committed so that running Plaza
// needs no Node) is exactly what `npm run build:viewer` makes of the sources today.
import { build } from "esbuild";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { expect, it } from "vitest";

const PKG = join(dirname(fileURLToPath(import.meta.url)), "..");

it("viewer/dist/viewer.js is rebuilt from the sources", async () => {
  const pkg = JSON.parse(readFileSync(join(PKG, "package.json"), "utf8")) as { scripts: Record<string, string> };
  // The same flags as the npm script.
  expect(pkg.scripts["build:viewer"]).toBe(
    "esbuild viewer/main.ts --bundle --format=esm --target=es2022 --minify --legal-comments=none --outfile=viewer/dist/viewer.js",
  );
  const out = await build({
    absWorkingDir: PKG,
    entryPoints: ["viewer/main.ts"],
    bundle: true,
    format: "esm",
    target: "es2022",
    minify: true,
    legalComments: "none",
    outfile: "viewer/dist/viewer.js",
    write: false,
    logLevel: "silent",
  });
  const fresh = out.outputFiles[0]!.text;
  expect(fresh === readFileSync(join(PKG, "viewer", "dist", "viewer.js"), "utf8"), "run `npm run build:viewer` and commit viewer/dist").toBe(true);
}, 60_000);
