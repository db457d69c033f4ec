/**
 * The official MCP conformance suite (@modelcontextprotocol/conformance) as tests run it, offline, in
 * a process of its own (the suite's command bundled by esbuild: programs.ts's `conformanceProgram`,
 * which also lets it run on Node 20): one server scenario
 * against a URL (`conformanceScenario`: the checks it printed and its exit code), or every server
 * scenario of the suite one after another in a single process (`conformanceSuite`: each scenario's
 * checks as it saved them). Each start of the suite's process costs more than a second of CPU, so a
 * file that needs many scenarios runs them all in one.
 */
import { execFile } from "node:child_process"
import { mkdtempSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { REPO_ROOT } from "../fixtures/paths.js"
import { conformanceProgram } from "./programs.js"

/** One check of a scenario's verbose output. */
export interface ConformanceCheck {
  readonly id: string
  readonly status: string
  readonly errorMessage?: string
}

/** Runs one server scenario of the suite against `url`. */
export const conformanceScenario = async (url: string, name: string): Promise<{ checks: ConformanceCheck[]; code: number; output: string }> => {
  const suite = await conformanceProgram()
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [suite, "server", "--url", url, "--scenario", name, "--verbose"],
      { cwd: REPO_ROOT, timeout: 60_000, maxBuffer: 8 * 1024 * 1024 },
      (error, stdout, stderr) => {
        const output = `${stdout}\n${stderr}`
        const start = stdout.indexOf("[")
        const end = stdout.lastIndexOf("]")
        let checks: ConformanceCheck[] = []
        try {
          checks = JSON.parse(stdout.slice(start, end + 1)) as ConformanceCheck[]
        } catch {
          // left empty: the assertions show the output
        }
        resolve({ checks, code: error === null ? 0 : typeof error.code === "number" ? error.code : 1, output })
      }
    )
  })
}

/** A run of every server scenario of the suite (`conformanceSuite`). */
export interface ConformanceSuiteRun {
  /** The scenarios the suite ran (all its server scenarios), in its order. */
  readonly scenarios: ReadonlyArray<string>
  /** How many scenarios the suite announced it would run. */
  readonly announced: number
  /** Each scenario's saved checks (none when it saved none: it threw) and its part of the output, by name. */
  readonly results: ReadonlyMap<string, { readonly checks: ConformanceCheck[]; readonly output: string }>
  /** The summary line of each scenario (`✓ ping: 1 passed, 0 failed`), by name. */
  readonly summary: ReadonlyMap<string, string>
  /** The process's exit code: 1 when any scenario failed (those not expected to pass do); -1 when it was killed. */
  readonly code: number
  readonly output: string
}

/**
 * Runs every server scenario of the suite (`server --suite all`) against `url` in one process,
 * one after another, each saving its checks to a temporary folder (removed afterwards). The
 * scenarios are those `conformance list` prints (both take the suite's full list).
 */
export const conformanceSuite = async (url: string): Promise<ConformanceSuiteRun> => {
  const suite = await conformanceProgram()
  const dir = mkdtempSync(join(tmpdir(), "mcp-store-conformance-"))
  return new Promise<ConformanceSuiteRun>((resolve) => {
    execFile(
      process.execPath,
      [suite, "server", "--url", url, "--suite", "all", "-o", dir],
      { cwd: REPO_ROOT, timeout: 120_000, maxBuffer: 32 * 1024 * 1024 },
      (error, stdout, stderr) => {
        const output = `${stdout}\n${stderr}`
        const summaryAt = stdout.indexOf("\n=== SUMMARY ===")
        const body = summaryAt < 0 ? stdout : stdout.slice(0, summaryAt)
        const results = new Map<string, { checks: ConformanceCheck[]; output: string }>()
        // "=== Running scenario: <name> ===", then "Results saved to <folder>" once it saved its checks.
        for (const part of body.split(/^=== Running scenario: /m).slice(1)) {
          const name = part.slice(0, part.indexOf(" ===")).trim()
          const saved = /^Results saved to (.+)$/m.exec(part)?.[1]
          let checks: ConformanceCheck[] = []
          if (saved !== undefined) {
            try {
              checks = JSON.parse(readFileSync(join(saved.trim(), "checks.json"), "utf8")) as ConformanceCheck[]
            } catch {
              // left empty: the assertions show the output
            }
          }
          results.set(name, { checks, output: `=== Running scenario: ${part}` })
        }
        const summary = new Map(
          [...(summaryAt < 0 ? "" : stdout.slice(summaryAt)).matchAll(/^[✓✗] ([a-z0-9-]+): .*$/gm)].map((m) => [m[1]!, m[0]] as const)
        )
        rmSync(dir, { recursive: true, force: true })
        resolve({
          scenarios: [...results.keys()],
          announced: Number(/^Running all suite \((\d+) scenarios\)/m.exec(stdout)?.[1] ?? -1),
          results,
          summary,
          // -1 when it did not exit by itself (killed at the time-out, or by a signal).
          code: error === null ? 0 : typeof error.code === "number" ? error.code : -1,
          output
        })
      }
    )
  })
}
