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
 *   warning, so it never outlives the run; the temporary folders `freshDir` made are removed.
 * - With MCPSTORE_TEST_CPU=<file>, each file appends a line to that file: the CPU time (ms) the test
 *   process spent on it, that of the processes it started and that ended during it (on Linux; a
 *   process still running at the file's end is not counted), and its name, to find the files that
 *   cost the suite most (docs/testing.md).
 */
import type { ChildProcess } from "node:child_process"
import { appendFileSync, readFileSync, rmSync } from "node:fs"
import { afterAll, beforeAll, expect } from "vitest"
import { configureLogging } from "../../src/logging/log.js"

const wanted = process.env.MCPSTORE_TEST_LOG
configureLogging({ level: wanted === "debug" || wanted === "info" || wanted === "warning" ? wanted : "error" })

const cpuFile = process.env.MCPSTORE_TEST_CPU
if (cpuFile !== undefined) {
  /** CPU time (ms) of the processes this one started and that ended (Linux: /proc/self/stat's cutime and cstime; elsewhere 0). */
  const children = (): number => {
    try {
      const stat = readFileSync("/proc/self/stat", "utf8")
      const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
      return ((Number(fields[13]) + Number(fields[14])) * 1000) / 100
    } catch {
      return 0
    }
  }
  let started = process.cpuUsage()
  let startedChildren = children()
  beforeAll(() => {
    started = process.cpuUsage()
    startedChildren = children()
  })
  afterAll(() => {
    const used = process.cpuUsage(started)
    appendFileSync(cpuFile, `${Math.round((used.user + used.system) / 1000)}\t${Math.round(children() - startedChildren)}\t${expect.getState().testPath ?? "?"}\n`)
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
  const dirs = (globalThis as { [key: symbol]: Set<string> | undefined })[Symbol.for("mcp-store.test.fresh-dirs")]
  for (const dir of dirs ?? []) rmSync(dir, { recursive: true, force: true, maxRetries: 3 })
  dirs?.clear()
})
