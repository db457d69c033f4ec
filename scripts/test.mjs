#!/usr/bin/env node
// `npm test`: the checks (the type-checks) and the test files (vitest run) at the same time, since
// the tests mostly wait on servers and processes while a check keeps one core busy for a while; the
// checks' output is printed after the tests', and the run fails when any of them fails. Arguments
// go to vitest (`npm test -- test/http/system.test.ts`).
import { spawn } from "node:child_process"
import { createRequire } from "node:module"
import { mkdtempSync, readdirSync, rmSync, statfsSync, statSync } from "node:fs"
import { join } from "node:path"

const require = createRequire(import.meta.url)
const tsc = require.resolve("typescript/bin/tsc")
const vitest = require.resolve("vitest/vitest.mjs")

/**
 * The checks that run beside the tests, one after the other: each program's exit code and output.
 * Incremental, with their state in .tmp/ (git-ignored): a run after a small change re-checks what
 * it touches (measured: 10 to 12 s of CPU instead of 40 s for the main project); a fresh clone
 * checks everything.
 */
const incremental = (name) => ["--incremental", "--tsBuildInfoFile", `.tmp/${name}.tsbuildinfo`]
// Garbage collection on tsc's own thread: about 7 % less CPU for the same wall time (measured on the
// main check from scratch), CPU the test files beside it use.
const NODE_FLAGS = ["--single-threaded-gc"]
const CHECKS = [
  ["type-check (tsc --noEmit -p .)", [...NODE_FLAGS, tsc, "--noEmit", "-p", ".", ...incremental("tsc-main")], ".tmp/tsc-main.tsbuildinfo"],
  ["type-check of the dashboard (tsc --noEmit -p src/ui)", [...NODE_FLAGS, tsc, "--noEmit", "-p", "src/ui", ...incremental("tsc-ui")], ".tmp/tsc-ui.tsbuildinfo"]
]
/** The checks' processes running now (ended with the run on a signal). */
const running = new Set()
const run = (args) =>
  new Promise((resolve) => {
    const child = spawn(process.execPath, args, { stdio: ["ignore", "pipe", "pipe"] })
    running.add(child)
    child.on("close", () => running.delete(child))
    let output = ""
    child.stdout.on("data", (b) => (output += b))
    child.stderr.on("data", (b) => (output += b))
    child.on("error", (error) => resolve({ code: 1, output: String(error) }))
    child.on("close", (code) => resolve({ code: code ?? 1, output }))
  })
// An incremental check that fails is run again from scratch before the failure is believed: after
// many changes at once (a merge), tsc's saved state has reported errors a fresh check does not
// ("Two different types with this name exist, but they are unrelated").
let stopping = false
const checks = (async () => {
  const results = []
  for (const [name, args, state] of CHECKS) {
    if (stopping) break
    let result = await run(args)
    if (result.code !== 0 && !stopping) {
      rmSync(state, { force: true })
      result = await run(args)
    }
    results.push({ name, ...result })
  }
  return results
})()
/**
 * The tests' temporary folders (TMPDIR, unless it is set) on a memory file system when the machine
 * has one with room: Linux's /dev/shm. The tests make thousands of files (the package test installs
 * the package's 18,000; every store writes and syncs its services and records files, every browser
 * its profile): on a disk that cost the run about 30 s of CPU (sys) of 330. One folder per run,
 * removed at its end with whatever the tests' processes left in it; a run that was killed leaves
 * its folder, removed by a run an hour later.
 */
const MEMORY_FS = "/dev/shm"
const ROOM = 2 * 1024 ** 3
const STALE_MS = 3_600_000
const tmpFolder = (() => {
  if (process.env.TMPDIR || process.platform !== "linux") return undefined
  try {
    const { bavail, bsize } = statfsSync(MEMORY_FS)
    if (bavail * bsize < ROOM) return undefined
    for (const name of readdirSync(MEMORY_FS)) {
      const owner = /^mcp-store-test-(\d+)-/.exec(name)?.[1]
      if (owner === undefined || alive(Number(owner))) continue
      try {
        // Unchanged for an hour too: /dev/shm may be shared with another PID namespace (a container), where a live run's pid is not seen here.
        if (statSync(join(MEMORY_FS, name)).mtimeMs > Date.now() - STALE_MS) continue
        rmSync(join(MEMORY_FS, name), { recursive: true, force: true })
      } catch {
        // another user's (/dev/shm is shared): not ours to remove
      }
    }
    return mkdtempSync(join(MEMORY_FS, `mcp-store-test-${process.pid}-`))
  } catch {
    return undefined
  }
})()
function alive(pid) {
  try {
    process.kill(pid, 0)
    return true
  } catch (e) {
    return e.code === "EPERM"
  }
}

const tests = new Promise((resolve) => {
  const env = tmpFolder === undefined ? process.env : { ...process.env, TMPDIR: tmpFolder }
  const child = spawn(process.execPath, [vitest, "run", ...process.argv.slice(2)], { stdio: "inherit", env })
  child.on("error", () => resolve(1))
  child.on("close", (code) => resolve(code ?? 1))
  // Ctrl-C reaches vitest and the checks too (one process group): this process waits for them to end and cleans up.
  for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"])
    process.on(signal, () => {
      stopping = true
      for (const each of [child, ...running]) each.kill(signal)
    })
})

const [results, tested] = await Promise.all([checks, tests])
if (tmpFolder !== undefined) {
  try {
    rmSync(tmpFolder, { recursive: true, force: true, maxRetries: 3 })
  } catch (e) {
    // A process of the tests still writing there (a run ended by a signal): the next run removes it.
    console.warn(`could not remove ${tmpFolder}: ${e.message}`)
  }
}
let failed = 0
for (const { name, code, output } of results) {
  if (code !== 0) {
    process.stdout.write(output)
    console.log(`${name} failed`)
    failed = code
  } else console.log(`${name} passed`)
}
process.exit(failed !== 0 ? failed : tested)
