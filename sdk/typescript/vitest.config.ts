import { defineConfig } from "vitest/config";

// The machine is shared and slow: generous timeouts, tests in files of their own.
export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    testTimeout: 30_000,
  },
});
