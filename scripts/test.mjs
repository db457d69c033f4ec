#!/usr/bin/env node
// `npm test`: the type-check (tsc --noEmit) and the test files (vitest run) at the same time, since
// the tests mostly wait on servers and processes while tsc keeps one core busy for a while; the
// type-check's output is printed after the tests', and the run fails when either fails. Arguments
// go to vitest (`npm test -- test/http/system.test.ts`).
import { spawn } from "node:child_process"
import { createRequire } from "node:module"

const require = createRequire(import.meta.url)
const tsc = require.resolve("typescript/bin/tsc")
const vitest = require.resolve("vitest/vitest.mjs")

const typeCheck = new Promise((resolve) => {
  const child = spawn(process.execPath, [tsc, "--noEmit", "-p", "."], { stdio: ["ignore", "pipe", "pipe"] })
  let output = ""
  child.stdout.on("data", (b) => (output += b))
  child.stderr.on("data", (b) => (output += b))
  child.on("error", (error) => resolve({ code: 1, output: String(error) }))
  child.on("close", (code) => resolve({ code: code ?? 1, output }))
})
const tests = new Promise((resolve) => {
  const child = spawn(process.execPath, [vitest, "run", ...process.argv.slice(2)], { stdio: "inherit" })
  child.on("error", () => resolve(1))
  child.on("close", (code) => resolve(code ?? 1))
})

const [checked, tested] = await Promise.all([typeCheck, tests])
if (checked.code !== 0) {
  process.stdout.write(checked.output)
  console.log("type-check failed (tsc --noEmit -p .)")
} else {
  console.log("type-check passed (tsc --noEmit -p .)")
}
process.exit(checked.code !== 0 ? checked.code : tested)
