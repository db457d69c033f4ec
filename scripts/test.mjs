#!/usr/bin/env node
// `npm test`: the checks (the type-checks) and the test files (vitest run) at the same time, since
// the tests mostly wait on servers and processes while a check keeps one core busy for a while; the
// checks' output is printed after the tests', and the run fails when any of them fails. Arguments
// go to vitest (`npm test -- test/http/system.test.ts`).
import { spawn } from "node:child_process"
import { createRequire } from "node:module"
import { rmSync } from "node:fs"

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
const CHECKS = [
  ["type-check (tsc --noEmit -p .)", [tsc, "--noEmit", "-p", ".", ...incremental("tsc-main")], ".tmp/tsc-main.tsbuildinfo"],
  ["type-check of the dashboard (tsc --noEmit -p src/ui)", [tsc, "--noEmit", "-p", "src/ui", ...incremental("tsc-ui")], ".tmp/tsc-ui.tsbuildinfo"]
]
const run = (args) =>
  new Promise((resolve) => {
    const child = spawn(process.execPath, args, { stdio: ["ignore", "pipe", "pipe"] })
    let output = ""
    child.stdout.on("data", (b) => (output += b))
    child.stderr.on("data", (b) => (output += b))
    child.on("error", (error) => resolve({ code: 1, output: String(error) }))
    child.on("close", (code) => resolve({ code: code ?? 1, output }))
  })
// An incremental check that fails is run again from scratch before the failure is believed: after
// many changes at once (a merge), tsc's saved state has reported errors a fresh check does not
// ("Two different types with this name exist, but they are unrelated").
const checks = (async () => {
  const results = []
  for (const [name, args, state] of CHECKS) {
    let result = await run(args)
    if (result.code !== 0) {
      rmSync(state, { force: true })
      result = await run(args)
    }
    results.push({ name, ...result })
  }
  return results
})()
const tests = new Promise((resolve) => {
  const child = spawn(process.execPath, [vitest, "run", ...process.argv.slice(2)], { stdio: "inherit" })
  child.on("error", () => resolve(1))
  child.on("close", (code) => resolve(code ?? 1))
})

const [results, tested] = await Promise.all([checks, tests])
let failed = 0
for (const { name, code, output } of results) {
  if (code !== 0) {
    process.stdout.write(output)
    console.log(`${name} failed`)
    failed = code
  } else console.log(`${name} passed`)
}
process.exit(failed !== 0 ? failed : tested)
