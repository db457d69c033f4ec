// Test runner settings: real servers and processes are involved, so time-outs are generous, and
// each file runs in a fresh fork (a file that fails badly, or a worker whose module loading timed
// out on a loaded machine, cannot take the files after it down with it; `isolate: false` saved
// about a third of the run but did exactly that once). The test files still leave nothing global
// behind: every file ends the servers, processes, listeners and environment variables it starts
// or changes.
import { defineConfig } from "vitest/config"
import SlowestFirst from "./test/support/sequencer.js"

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    // Lines of in-process stores: errors only (test/support/log-setup.ts). Run before every file.
    setupFiles: ["test/support/log-setup.ts"],
    // Once per run: the stdio fixtures' esbuild bundles, when their sources changed (test/support/programs.ts).
    globalSetup: ["test/support/global-setup.ts"],
    // The slowest files start first, so the two forks end together (test/support/sequencer.ts).
    sequence: { sequencer: SlowestFirst },
    pool: "forks",
    poolOptions: { forks: { maxForks: 2, minForks: 1 } },
    testTimeout: 30_000,
    hookTimeout: 30_000,
    // The skip reporter ends the run with the files that skipped for want of redis-server or Chromium.
    reporters: ["default", "json", "./test/support/skip-reporter.ts"],
    outputFile: { json: ".tmp/vitest-results.json" }
  }
})
