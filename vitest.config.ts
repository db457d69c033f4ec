// Test runner settings: real servers and processes are involved, so time-outs are generous and
// files run in separate forks (a leaked child in one file cannot hide in another's process).
import { defineConfig } from "vitest/config"

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    // Lines of in-process stores: errors only (test/support/log-setup.ts).
    setupFiles: ["test/support/log-setup.ts"],
    pool: "forks",
    poolOptions: { forks: { maxForks: 2, minForks: 1 } },
    testTimeout: 30_000,
    hookTimeout: 30_000,
    reporters: ["default", "json"],
    outputFile: { json: ".tmp/vitest-results.json" }
  }
})
