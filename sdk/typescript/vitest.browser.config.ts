import { defineConfig } from "vitest/config";

// The real-browser test (headless Debian Chromium under puppeteer-core): `npm run test:browser`.
export default defineConfig({
  test: {
    include: ["browser-test/**/*.test.ts"],
    testTimeout: 120_000,
    hookTimeout: 120_000,
  },
});
