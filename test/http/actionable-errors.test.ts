// Errors a person can act on, over real HTTP against real stdio upstreams: a
// refused body is described in plain words (never the schema library's "Expected ..., actual ..."),
// a field an endpoint does not know is named in the 400 with the allowed ones, `arguments` is an
// alias of `args`, a name not found gets "did you mean" from the caller's own scope only, a tool of
// a service that never connected is 503 with its status, next retry and Retry-After (by callable
// name and by service_name + tool_name), and arguments refused by the tool's schema are recorded as
// `invalid_arguments`. The call route's answers are checked on both paths (the direct route, and
// HttpApi, which takes any request with a query string).
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { demoServer } from "../fixtures/paths.js"
import { closedPort, fixtureService, localService, startTestServer, type Reply, type TestServer } from "../support/index.js"

const AGENT = "agent-1"
/** The schema library's own wording, which no answer may show. */
const LIBRARY_WORDING = /Expected |actual |readonly |\{ \[x: string\]/

/** A VALIDATION_ERROR whose message has no library wording; its details.fields. */
const refused = (reply: Reply): Array<{ field: string; problem: string }> => {
  expect(reply.status, reply.text).toBe(400)
  expect(reply.body.error.code).toBe("VALIDATION_ERROR")
  expect(reply.body.message).toBe(reply.body.error.message)
  expect(reply.body.message).not.toMatch(LIBRARY_WORDING)
  const fields = reply.body.error.details.fields as Array<{ field: string; problem: string }>
  for (const f of fields) expect(f.problem).not.toMatch(LIBRARY_WORDING)
  return fields
}

describe("errors a person can act on", { timeout: 20_000 }, () => {
  let server: TestServer
  /** call_tool through the direct route, and through HttpApi (a query string sends it there). */
  const paths = ["/for_store/call_tool", "/for_store/call_tool?via=httpapi"] as const

  beforeAll(async () => {
    server = await startTestServer()
    const down = await closedPort()
    const added = await server.post("/for_store/add_service?wait=15", [
      localService("demo", demoServer),
      fixtureService("fx"),
      // Never connects: nothing listens on its port.
      { name: "down", url: `http://127.0.0.1:${down}/mcp` }
    ])
    expect(added.status, added.text).toBe(200)
    const agent = await server.post(`/for_agent/${AGENT}/add_service?wait=15`, fixtureService("secret-svc"))
    expect(agent.status, agent.text).toBe(200)
    const waited = await server.post("/for_store/wait_service", { client_id_or_service_name: "down", status: ["reconnecting", "unreachable"], timeout: 15 })
    expect(waited.body.data.result, waited.text).toBe(true)
  }, 40_000)
  afterAll(async () => {
    await server?.cleanup()
  }, 15_000)

  describe("plain words for a refused body", () => {
    it.each(paths)("%s: args of the wrong type, a missing field, a time-out that is not a number", async (path) => {
      expect(refused(await server.post(path, { tool_name: "demo__add", args: "a=1" }))).toEqual([{ field: "args", problem: "must be an object (got a string)" }])
      const missing = await server.post(path, { args: {} })
      expect(refused(missing)).toEqual([{ field: "tool_name", problem: "is required" }])
      expect(missing.body.message).toBe('Invalid request: missing field "tool_name"')
      const timeout = await server.post(path, { tool_name: "demo__add", timeout: "5" })
      expect(refused(timeout)).toEqual([{ field: "timeout", problem: "must be a number (got a string)" }])
      expect(timeout.body.message).toBe('Invalid request: "timeout" must be a number (got a string)')
      expect(refused(await server.post(path, { tool_name: "demo__add", timeout: 4000 }))).toEqual([
        { field: "timeout", problem: "must be a number less than or equal to 3600 (got 4000)" }
      ])
    })

    it.each(paths)("%s: an unknown field is named, with the allowed ones", async (path) => {
      const reply = await server.post(path, { tool_name: "demo__add", agrs: { a: 1, b: 2 } })
      expect(refused(reply)).toEqual([{ field: "agrs", problem: "is unknown (allowed: tool_name, args, arguments, service_name, timeout, accept_input_required, request_state, input_responses, async)" }])
      expect(reply.body.message).toBe('Invalid request: unknown field "agrs" (allowed: tool_name, args, arguments, service_name, timeout, accept_input_required, request_state, input_responses, async)')
    })

    it("other endpoints: unknown fields named, query values and list items in plain words", async () => {
      const wait = await server.post("/for_store/wait_service", { client_id_or_service_name: "demo", state: "healthy" })
      expect(refused(wait).map((f) => f.field)).toEqual(["state"])
      expect(wait.body.message).toMatch(/^Invalid request: unknown field "state" \(allowed: client_id_or_service_name, status, timeout, raise_on_timeout\)$/)
      const restart = await server.post("/for_store/restart_service", { service_name: "demo", force: true })
      expect(refused(restart)).toEqual([{ field: "force", problem: "is unknown (allowed: service_name)" }])
      const records = await server.get("/for_store/tool_records?limit=abc")
      expect(refused(records)).toEqual([{ field: "limit", problem: 'must be a number (got "abc")' }])
      const outcome = await server.get("/for_store/tool_records?outcome=nope")
      expect(refused(outcome)[0]!.problem).toMatch(/^must be one of success, tool_error, invalid_arguments, protocol_error, .* \(got "nope"\)$/)
      const check = await server.post("/for_store/network_check", { endpoints: [5] })
      expect(refused(check)).toEqual([{ field: "endpoints[0]", problem: "must be a string or an object (got a number)" }])
      // Nothing changed: the service whose restart was refused is still the one it was.
      expect((await server.get("/for_store/service_status/demo")).body.status).toBe("healthy")
    })

    it("a body with thousands of unknown fields gets a bounded answer", async () => {
      const body: Record<string, unknown> = { tool_name: "demo__add" }
      for (let i = 0; i < 5000; i++) body[`junk_${i}_${"x".repeat(150)}`] = i
      const reply = await server.post("/for_store/call_tool", body)
      const fields = refused(reply)
      expect(fields.length).toBeLessThanOrEqual(50)
      expect(fields[0]!.field.length).toBeLessThanOrEqual(103)
      expect(reply.text.length).toBeLessThan(64 * 1024)
      // A field name is quoted cut to 100 characters.
      expect(reply.body.message).toMatch(/^Invalid request: unknown field "junk_0_x{93}\.\.\." \(allowed: tool_name, args, arguments, service_name, timeout, accept_input_required, request_state, input_responses, async\)/)
    })

    it("a service definition keeps its unknown fields (they are not refused)", async () => {
      const reply = await server.post("/for_store/add_service", { name: "kept", url: "http://127.0.0.1:9/mcp", note: "mine" })
      expect(reply.status, reply.text).toBe(200)
      expect((server.readFile() as any).mcpServers.kept.note).toBe("mine")
      expect((await server.del("/for_store/delete_service/kept")).status).toBe(200)
    })
  })

  describe("`arguments`, MCP's name, as an alias of `args`", () => {
    it.each(paths)("%s: the call gets its arguments", async (path) => {
      const reply = await server.post(path, { tool_name: "demo__add", arguments: { a: 2, b: 40 } })
      expect(reply.status, reply.text).toBe(200)
      expect(reply.body.result).toEqual({ sum: 42 })
    })

    it.each(paths)("%s: both given is refused, naming `arguments`", async (path) => {
      const reply = await server.post(path, { tool_name: "demo__add", args: { a: 1, b: 1 }, arguments: { a: 2, b: 2 } })
      expect(refused(reply)).toEqual([{ field: "arguments", problem: 'is an alias of "args": give one of the two, not both' }])
    })
  })

  describe("did you mean", () => {
    it.each(paths)("%s: a near-miss callable name, original name or service name", async (path) => {
      const typo = await server.post(path, { tool_name: "demo__addd", args: { a: 1, b: 2 } })
      expect(typo.status, typo.text).toBe(404)
      expect(typo.body.error).toMatchObject({ code: "TOOL_NOT_FOUND", details: { tool_name: "demo__addd", suggestions: ["demo__add"] } })
      expect(typo.body.message).toBe("Tool 'demo__addd' not found in the store; did you mean 'demo__add'?")
      const wrongService = await server.post(path, { tool_name: "dmeo__add" })
      expect(wrongService.body.error.details.suggestions).toEqual(["demo__add"])
      const original = await server.post(path, { tool_name: "ad", args: {} })
      expect(original.status).toBe(404)
      expect(original.body.error.details.suggestions).toContain("demo__add")
      const service = await server.post(path, { tool_name: "add", service_name: "dem" })
      expect(service.status).toBe(404)
      expect(service.body.error).toMatchObject({ code: "SERVICE_NOT_FOUND", details: { suggestions: ["demo"] } })
      expect(service.body.message).toBe("Service 'dem' not found in the store; did you mean 'demo'?")
      // Nothing close: no suggestion, and the message says only what was not found.
      const far = await server.post(path, { tool_name: "zzzzzzzz__qqqq" })
      expect(far.body.error.details.suggestions).toEqual([])
      expect(far.body.message).toBe("Tool 'zzzzzzzz__qqqq' not found in the store")
    })

    it("the service look-ups of other endpoints suggest too", async () => {
      const info = await server.get("/for_store/get_service_info?name=fy")
      expect(info.status).toBe(404)
      expect(info.body.error.details.suggestions).toEqual(["fx"])
      expect(info.body.message).toMatch(/did you mean 'fx'\?$/)
    })

    it("never suggests another scope's names", async () => {
      // The agent's service and tools, asked for from the store: not found, nothing suggested.
      const tool = await server.post("/for_store/call_tool", { tool_name: "secret-svc__ech", args: {} })
      expect(tool.status).toBe(404)
      expect(tool.text).not.toMatch(/secret-svc__echo/)
      expect(tool.body.error.details.suggestions).toEqual([])
      const service = await server.get("/for_store/get_service_info?name=secret-sv")
      expect(service.status).toBe(404)
      expect(service.body.error.details.suggestions).toEqual([])
      expect(service.text).not.toMatch(/'secret-svc'/)
      // And the store's, asked for from the agent.
      const fromAgent = await server.post(`/for_agent/${AGENT}/call_tool`, { tool_name: "demo__addd" })
      expect(fromAgent.status).toBe(404)
      expect(fromAgent.body.error.details.suggestions).toEqual([])
      expect(fromAgent.text).not.toMatch(/demo__add'/)
      // The agent's own names are suggested to it.
      const own = await server.post(`/for_agent/${AGENT}/call_tool`, { tool_name: "secret-svc__ech" })
      expect(own.body.error.details.suggestions).toEqual(["secret-svc__echo"])
    })
  })

  describe("a service that never connected", () => {
    it.each(paths)("%s: its tool is 503 with status and next retry, by callable name and by service_name", async (path) => {
      for (const body of [{ tool_name: "down__echo" }, { tool_name: "echo", service_name: "down" }]) {
        const reply = await server.post(path, body)
        expect(reply.status, `${JSON.stringify(body)}: ${reply.text}`).toBe(503)
        expect(reply.body.error.code).toBe("SERVICE_UNAVAILABLE")
        expect(reply.body.error.details).toMatchObject({ service_name: "down", status: expect.stringMatching(/^(reconnecting|unreachable)$/) })
        expect(Date.parse(reply.body.error.details.next_retry_at)).not.toBeNaN()
        // The retry hint: seconds until the next attempt, in the details and as Retry-After.
        const seconds = reply.body.error.details.retry_after_seconds
        expect(Number.isInteger(seconds) && seconds >= 1, String(seconds)).toBe(true)
        expect(reply.headers.get("retry-after")).toBe(String(seconds))
        expect(reply.body.message).toMatch(/^Service 'down' is (reconnecting|unreachable); try again later/)
      }
    })
  })

  describe("arguments refused by the tool's schema", () => {
    it("are 400 INVALID_ARGUMENTS and recorded as invalid_arguments, not protocol_error", async () => {
      const reply = await server.post("/for_store/call_tool", { tool_name: "demo__add", args: { a: "x", b: 1 } })
      expect(reply.status, reply.text).toBe(400)
      expect(reply.body.error.code).toBe("INVALID_ARGUMENTS")
      const records = await server.get("/for_store/tool_records?outcome=invalid_arguments")
      expect(records.status, records.text).toBe(200)
      expect(records.body.executions).toEqual([expect.objectContaining({ service_name: "demo", tool_name: "add", outcome: "invalid_arguments", params: { a: "x", b: 1 } })])
      expect((await server.get("/for_store/tool_records?outcome=protocol_error")).body.executions).toEqual([])
      const rates = await server.get("/monitoring/error_rate_stats")
      expect(rates.body.by_outcome.invalid_arguments).toBe(1)
      expect(rates.body.by_outcome.protocol_error).toBe(0)
    })
  })
})
