// Test runner settings: real servers and processes are involved, so time-outs are generous. Four
// forks on two cores, since most files spend much of their time waiting (timers, processes, the
// network): with two, a fifth of the cores' time went idle; with three, a warm run took 4 min 49 s,
// with four 4 min 19 s (one run each, the same tree, nothing else running). Each runs one file after another with a
// shared module cache (`isolate: false`): loading the store's modules afresh for every file took
// about half of the run's CPU. So every file ends the
// servers, processes, listeners and environment variables it starts or changes, and a file that
// stubs a module loads what it tests afresh and resets the cache when it is done.
import { defineConfig } from "vitest/config"
import SlowestFirst from "./test/support/sequencer.js"

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    // Before every file: in-process stores log errors only; a file may not leave the environment changed.
    setupFiles: ["test/support/file-setup.ts"],
    // Once per run: the stdio fixtures' esbuild bundles, when their sources changed (test/support/programs.ts).
    globalSetup: ["test/support/global-setup.ts"],
    // The slowest files start first, so the forks end together (test/support/sequencer.ts).
    sequence: { sequencer: SlowestFirst },
    pool: "forks",
    // As many forks at the start as at most: with fewer, tinypool ends the idle ones at the end of the
    // run with an unhandled "Terminating worker thread", failing a green run.
    poolOptions: { forks: { maxForks: 4, minForks: 4, isolate: false } },
    testTimeout: 30_000,
    hookTimeout: 30_000,
    // The skip reporter ends the run with the files that skipped for want of redis-server or Chromium.
    reporters: ["default", "json", "./test/support/skip-reporter.ts"],
    outputFile: { json: ".tmp/vitest-results.json" }
  }
})
