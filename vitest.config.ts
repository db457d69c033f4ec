// Test runner settings: real servers and processes are involved, so time-outs are generous.
//
// Files run in two forks that are kept for the whole run (`isolate: false`): a fork runs one file
// after another and keeps its module cache, so effect, the MCP SDK and the sources are loaded once
// per fork rather than once per file (that alone was ~3.5 s of CPU a file, a third of the suite's
// time on two cores). What this asks of a test file: leave nothing global behind. Every file
// already ends the servers, processes, listeners and environment variables it starts or changes
// (afterEach/afterAll, `finally`); the setup file sets the log level again before each file; and
// the one file that stubs a module (test/config/services-file-failure.test.ts, `vi.mock`) loads
// what it tests afresh and resets the module cache when it is done.
import { defineConfig } from "vitest/config"

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    // Lines of in-process stores: errors only (test/support/log-setup.ts). Run before every file.
    setupFiles: ["test/support/log-setup.ts"],
    // Once per run: the stdio fixtures' esbuild bundles, when their sources changed (test/support/programs.ts).
    globalSetup: ["test/support/global-setup.ts"],
    pool: "forks",
    poolOptions: { forks: { maxForks: 2, minForks: 1, isolate: false } },
    testTimeout: 30_000,
    hookTimeout: 30_000,
    reporters: ["default", "json"],
    outputFile: { json: ".tmp/vitest-results.json" }
  }
})
