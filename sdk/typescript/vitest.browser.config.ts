import { defineConfig } from "vitest/config";

// The real-browser test (headless Debian Chromium under puppeteer-core) and the Node end-to-end
// runs against `plaza up` (e2e/): `npm run test:browser`, CI's browser/e2e step.
export default defineConfig({
  test: {
    include: ["browser-test/**/*.test.ts", "e2e/**/*.test.ts"],
    testTimeout: 120_000,
    hookTimeout: 120_000,
  },
});
