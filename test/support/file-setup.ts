/**
 * Vitest setup, run before every test file:
 * - In-process stores log through the one logger (src/logging/log.ts) to stderr; a test run would
 *   fill the report with every service's lifecycle lines. Only errors are shown, unless
 *   MCPSTORE_TEST_LOG names a level (debug, info, warning). Tests that check lines capture them
 *   with `captureLogs`, whatever this level.
 * - The forks run files one after another in one process (vitest.config.ts): a file that leaves an
 *   environment variable changed fails, instead of changing the files after it.
 * - A store process a file started and did not end (a test that timed out while the start was
 *   still waiting never got its handle: test/support/process.ts) is ended at the file's end, with a
 *   warning, so it never outlives the run.
 * - With MCPSTORE_TEST_CPU=<file>, each file appends a line to that file: its name and the CPU time
 *   the test process spent on it (ms; the processes it starts are not counted), to find the files
 *   that cost the suite most (docs/testing.md).
 */
import type { ChildProcess } from "node:child_process"
import { appendFileSync } from "node:fs"
import { afterAll, beforeAll, expect } from "vitest"
import { configureLogging } from "../../src/logging/log.js"

const wanted = process.env.MCPSTORE_TEST_LOG
configureLogging({ level: wanted === "debug" || wanted === "info" || wanted === "warning" ? wanted : "error" })

const cpuFile = process.env.MCPSTORE_TEST_CPU
if (cpuFile !== undefined) {
  let started = process.cpuUsage()
  beforeAll(() => void (started = process.cpuUsage()))
  afterAll(() => {
    const used = process.cpuUsage(started)
    appendFileSync(cpuFile, `${Math.round((used.user + used.system) / 1000)}\t${expect.getState().testPath ?? "?"}\n`)
  })
}

const environment = { ...process.env }
afterAll(() => {
  const changed = [...new Set([...Object.keys(environment), ...Object.keys(process.env)])].filter((name) => environment[name] !== process.env[name])
  expect(changed, "environment variables this file left changed").toEqual([])
})

afterAll(() => {
  const live = (globalThis as { [key: symbol]: Set<ChildProcess> | undefined })[Symbol.for("mcp-store.test.live-store-processes")]
  for (const child of live ?? []) {
    console.warn(`a store process (pid ${child.pid}) this file started was still running at its end: ended`)
    child.kill("SIGKILL")
  }
  live?.clear()
})
