/**
 * The official MCP conformance suite (@modelcontextprotocol/conformance) as tests run it: one server
 * scenario against a URL, in its own process (the suite's command bundled by esbuild, programs.ts's
 * `conformanceSuite`, which also lets it run on Node 20), offline; resolves with the checks it
 * printed and its exit code.
 */
import { execFile } from "node:child_process"
import { REPO_ROOT } from "../fixtures/paths.js"
import { conformanceSuite } from "./programs.js"

/** One check of a scenario's verbose output. */
export interface ConformanceCheck {
  readonly id: string
  readonly status: string
  readonly errorMessage?: string
}

/** Runs one server scenario of the suite against `url`. */
export const conformanceScenario = async (url: string, name: string): Promise<{ checks: ConformanceCheck[]; code: number; output: string }> => {
  const suite = await conformanceSuite()
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

/** The names of the suite's server scenarios (`conformance list`). */
export const conformanceServerScenarios = async (): Promise<string[]> => {
  const suite = await conformanceSuite()
  return new Promise((resolve, reject) => {
    execFile(process.execPath, [suite, "list"], { cwd: REPO_ROOT, timeout: 60_000 }, (error, stdout) => {
      if (error !== null) return reject(error)
      const start = stdout.indexOf("Server scenarios")
      const end = stdout.indexOf("Client scenarios")
      resolve([...stdout.slice(start, end < 0 ? undefined : end).matchAll(/^\s+- ([a-z0-9-]+) \[/gm)].map((m) => m[1]!))
    })
  })
}
