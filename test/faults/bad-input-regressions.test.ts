// The bad inputs the fuzz run (fuzz.test.ts) found, pinned as plain cases so that they are checked
// on every run whatever the random seed: deeply nested JSON bodies, deeply nested tool arguments
// (which also poisoned the tool records), paths starting with "//" (500, and a way past the API
// key), and a call to a service still initializing when the call's time-out passes.
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { resolveOptions } from "../../src/config/options.js"
import { startServer, type RunningServer } from "../../src/http/server.js"
import { startHttpFixture, type HttpFixture } from "../fixtures/http-fixture.js"
import { rawRequest, startTestServer, type TestServer } from "../support/index.js"

const JSON_TYPE = { "content-type": "application/json" }
const nestedArrays = (n: number) => `${"[".repeat(n)}${"]".repeat(n)}`
const nestedObjects = (n: number) => `${'{"a":'.repeat(n)}1${"}".repeat(n)}`
const post = (url: string, body: string) => rawRequest(url, "POST", body, { ...JSON_TYPE, "content-length": String(Buffer.byteLength(body)) })

describe("deeply nested JSON is bad input, not a server error", () => {
  let server: TestServer
  let http: HttpFixture
  beforeAll(async () => {
    http = await startHttpFixture()
    server = await startTestServer({ monitoring: { health_check_seconds: 30 } })
    await server.post("/for_store/add_service?wait=15", { name: "live", url: http.url })
  }, 30_000)
  afterAll(async () => {
    await server?.cleanup()
    await http?.stop()
  }, 15_000)

  // 5,000 levels of arrays is 10 KB, far under the 1 MiB body limit.
  it.each([
    "/for_store/call_tool",
    "/for_store/wait_service",
    "/for_store/restart_service",
    "/for_store/network_check",
    "/for_store/reset_config",
    "/for_agent/a1/call_tool"
  ])("POST %s with a body of 5,000 nested arrays: 400 VALIDATION_ERROR", { timeout: 10_000 }, async (path) => {
    const before = server.readFileText()
    const reply = await post(server.url + path, nestedArrays(5_000))
    expect(reply.status).toBe(400)
    expect(JSON.parse(reply.text).error.code).toBe("VALIDATION_ERROR")
    expect(server.readFileText()).toBe(before)
  })

  it("a field holding 5,000 nested arrays: 400", { timeout: 10_000 }, async () => {
    const reply = await post(`${server.url}/for_store/restart_service`, `{"service_name": ${nestedArrays(5_000)}}`)
    expect(reply.status).toBe(400)
  })

  it("call_tool with arguments nested 10,000 deep: a 4xx, and the tool records stay readable", { timeout: 10_000 }, async () => {
    const reply = await post(`${server.url}/for_store/call_tool`, `{"tool_name":"live__echo","args":{"text":${nestedObjects(10_000)}}}`)
    expect(reply.status).toBeGreaterThanOrEqual(400)
    expect(reply.status).toBeLessThan(500)
    // Before the fix the unserializable record stayed in memory: every page that held it failed to encode.
    const records = await server.get("/for_store/tool_records?limit=5")
    expect(records.status).toBe(200)
    const history = await server.get("/monitoring/tool_call_history?limit=5")
    expect(history.status).toBe(200)
  })
})

describe("paths that start with //", () => {
  let server: TestServer
  beforeAll(async () => {
    server = await startTestServer()
  }, 30_000)
  afterAll(async () => {
    await server?.cleanup()
  }, 15_000)

  // A route answers at its own spelling only ("//for_store/list_services" is no route): "//" is a
  // contract error, never a 500.
  it.each([["GET", "//"], ["GET", "///"], ["GET", "//?wait=true"], ["POST", "//"], ["OPTIONS", "//"]])(
    "%s %s: the root or a contract error, not 500",
    { timeout: 10_000 },
    async (method, path) => {
      const reply = await rawRequest(server.url + path, method, undefined, {})
      expect(reply.status).toBeLessThan(500)
      const body = JSON.parse(reply.text)
      if (reply.status === 200) expect(body).toMatchObject({ success: true, endpoints: expect.any(Object) })
      else expect(body).toMatchObject({ success: false, error: { code: expect.any(String) } })
    }
  )
})

describe("with an API key", () => {
  let running: RunningServer
  let dir: string
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "mcp-store-key-"))
    const options = resolveOptions({
      host: "127.0.0.1",
      port: 0,
      show_startup_info: false,
      log_level: "error",
      mcp_config_file: join(dir, "mcp.json"),
      api_key: "sekret"
    })
    running = await startServer({ server: options.server, store: options.store, graceMs: 100 })
  }, 30_000)
  afterAll(async () => {
    await running?.close()
    rmSync(dir, { recursive: true, force: true })
  }, 15_000)

  it.each(["/for_store/health", "//for_store/health", "//for_store/list_services", "//x/for_store/health"])(
    "GET %s without the key: 401",
    { timeout: 10_000 },
    async (path) => {
      const reply = await rawRequest(running.url + path, "GET", undefined, {})
      expect(reply.status).toBe(401)
    }
  )
})
