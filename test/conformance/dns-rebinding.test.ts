/**
 * The official MCP conformance suite (@modelcontextprotocol/conformance) runs its
 * `dns-rebinding-protection` scenario against the store's MCP endpoints: a request with a foreign
 * Host and Origin must be refused (4xx), one with the endpoint's own must be served (2xx). The
 * suite runs as its own process, on Node 20 through test/conformance/node20-hooks.mjs.
 */
import { execFile } from "node:child_process"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { REPO_ROOT } from "../fixtures/paths.js"
import { startTestServer, type TestServer } from "../support/index.js"

const SUITE = join(REPO_ROOT, "node_modules", "@modelcontextprotocol", "conformance", "dist", "index.js")
const HOOKS = join(REPO_ROOT, "test", "conformance", "node20-hooks.mjs")

interface Check {
  readonly id: string
  readonly status: string
  readonly errorMessage?: string
}

/** Runs one server scenario of the suite against `url`; resolves with its checks and exit code. */
const scenario = (url: string, name: string): Promise<{ checks: Check[]; code: number; output: string }> =>
  new Promise((resolve) => {
    execFile(
      process.execPath,
      ["--import", HOOKS, SUITE, "server", "--url", url, "--scenario", name, "--verbose"],
      { cwd: REPO_ROOT, timeout: 60_000, maxBuffer: 8 * 1024 * 1024 },
      (error, stdout, stderr) => {
        const output = `${stdout}\n${stderr}`
        const start = stdout.indexOf("[")
        const end = stdout.lastIndexOf("]")
        let checks: Check[] = []
        try {
          checks = JSON.parse(stdout.slice(start, end + 1)) as Check[]
        } catch {
          // left empty: the assertions below show the output
        }
        resolve({ checks, code: error === null ? 0 : typeof error.code === "number" ? error.code : 1, output })
      }
    )
  })

describe("MCP conformance: dns-rebinding-protection", () => {
  let server: TestServer
  beforeAll(async () => {
    server = await startTestServer()
  })
  afterAll(() => server.cleanup())

  it.each(["/mcp", "/for_agent/conformance/mcp"])("passes on %s", async (path) => {
    const result = await scenario(`${server.url}${path}`, "dns-rebinding-protection")
    const byId = Object.fromEntries(result.checks.map((c) => [c.id, c.status]))
    expect(byId, result.output).toEqual({
      "localhost-host-rebinding-rejected": "SUCCESS",
      "localhost-host-valid-accepted": "SUCCESS"
    })
    expect(result.code, result.output).toBe(0)
  }, 90_000)
})
