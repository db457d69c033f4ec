// The error contract over real HTTP: one body shape, real statuses (400, 404, 405, 413, 415),
// every refused field named in error.details.fields, and bad input never changes the services
// file or the registered services.
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { rawRequest, startTestServer, type Reply, type TestServer } from "../support/index.js"

/** The contract's error body: success false, message, error {code, message (the same), details}. */
const expectError = (reply: Reply, status: number, code: string) => {
  expect(reply.status, reply.text.slice(0, 300)).toBe(status)
  expect(reply.headers.get("content-type") ?? "").toMatch(/application\/json/)
  expect(reply.body).toEqual({
    success: false,
    message: expect.any(String),
    error: { code, message: reply.body.message, details: expect.any(Object) }
  })
  expect(reply.body.message.length).toBeGreaterThan(0)
}

const fieldsOf = (reply: Reply): string[] => (reply.body.error?.details?.fields ?? []).map((f: { field: string }) => f.field)

describe("contract errors", { timeout: 10_000 }, () => {
  let server: TestServer
  let fileBefore: string

  beforeAll(async () => {
    // A file that exists from the start, so "unchanged" compares bytes.
    server = await startTestServer({ services: { mcpServers: {}, note: "kept as is" } })
    fileBefore = server.readFileText()
  }, 15_000)
  afterAll(async () => {
    await server?.cleanup()
  }, 15_000)

  it("malformed JSON is 400 VALIDATION_ERROR naming the body", async () => {
    for (const body of ["{bad json", '{"tool_name": "x",}', "[1, 2"]) {
      const reply = await server.request("POST", "/for_store/call_tool", { body, headers: { "content-type": "application/json" } })
      expectError(reply, 400, "VALIDATION_ERROR")
      expect(fieldsOf(reply)).toEqual(["body"])
    }
  })

  it("a body with a content type other than JSON is 415", async () => {
    for (const type of ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"]) {
      const reply = await server.request("POST", "/for_store/add_service", {
        body: JSON.stringify({ name: "x", url: "http://127.0.0.1:9/mcp" }),
        headers: { "content-type": type }
      })
      expectError(reply, 415, "UNSUPPORTED_MEDIA_TYPE")
    }
    expect(server.readFileText()).toBe(fileBefore)
  })

  it("an unknown route is 404 NOT_FOUND", async () => {
    for (const [method, path] of [
      ["GET", "/no/such/route"],
      ["POST", "/for_store/no_such_endpoint"],
      ["GET", "/for_agent/a1/no_such_endpoint"]
    ] as const) {
      const reply = await server.request(method, path, method === "POST" ? { body: "{}", headers: { "content-type": "application/json" } } : {})
      expectError(reply, 404, "NOT_FOUND")
    }
  })

  it("a known path with the wrong method is 405 METHOD_NOT_ALLOWED naming the allowed method", async () => {
    for (const [method, path, allowed] of [
      ["GET", "/for_store/add_service", "POST"],
      ["DELETE", "/for_store/call_tool", "POST"],
      ["POST", "/for_store/list_services", "GET"],
      ["GET", "/for_agent/a1/wait_service", "POST"],
      ["DELETE", "/health", "GET"]
    ] as const) {
      const reply = await server.request(method, path, method === "POST" ? { body: "{}", headers: { "content-type": "application/json" } } : {})
      expectError(reply, 405, "METHOD_NOT_ALLOWED")
      expect(reply.body.error.details.allowed, `${method} ${path}`).toEqual([allowed])
    }
  })

  const big = JSON.stringify({ name: "big", url: "http://127.0.0.1:9/mcp", padding: "x".repeat(1024 * 1024 + 10) })

  it("a body over 1 MiB with content-length is 413 and changes nothing", { timeout: 15_000 }, async () => {
    const reply = await rawRequest(`${server.url}/for_store/add_service`, "POST", big, {
      "content-type": "application/json",
      "content-length": String(Buffer.byteLength(big))
    })
    expect(reply.status).toBe(413)
    expect(JSON.parse(reply.text)).toMatchObject({ success: false, error: { code: "PAYLOAD_TOO_LARGE" } })
    expect(server.readFileText()).toBe(fileBefore)
    expect(server.running.store.forStore().listServices()).toEqual([])
    // Just under the limit is accepted as far as size goes (refused for its content, not its size).
    const justUnder = JSON.stringify({ name: "a__b", url: "http://127.0.0.1:9/mcp", padding: "x".repeat(1024 * 1024 - 200) })
    const under = await rawRequest(`${server.url}/for_store/add_service`, "POST", justUnder, { "content-type": "application/json" })
    expect(under.status).toBe(400)
  })

  it("a chunked body over 1 MiB (no content-length) is 413 too, not a dropped connection", { timeout: 15_000 }, async () => {
    const reply = await rawRequest(`${server.url}/for_store/add_service`, "POST", big, {
      "content-type": "application/json",
      "transfer-encoding": "chunked"
    }).catch((e: Error) => ({ status: 0, text: `no answer: ${e.message}` }))
    expect(reply.text).toMatch(/PAYLOAD_TOO_LARGE/)
    expect(reply.status).toBe(413)
    expect(server.readFileText()).toBe(fileBefore)
    // The server is still fine afterwards.
    expect((await server.get("/health")).status).toBe(200)
  })

  it("bad service names are 400 naming the field, and the file is unchanged", async () => {
    const names = ["a__b", "../x", "x".repeat(10_000), "", "-lead", "has space", "x_byagent_y", "x".repeat(65), "a/b"]
    for (const name of names) {
      const reply = await server.post("/for_store/add_service", { name, url: "http://127.0.0.1:9/mcp" })
      expectError(reply, 400, "VALIDATION_ERROR")
      expect(fieldsOf(reply), name.slice(0, 20)).toContain("name")
    }
    const inMap = await server.post("/for_store/add_service", { mcpServers: { "a__b": { url: "http://127.0.0.1:9/mcp" } } })
    expectError(inMap, 400, "VALIDATION_ERROR")
    expect(fieldsOf(inMap)).toEqual(["mcpServers.a__b.name"])
    // One bad entry refuses the whole request: the good one is not added either.
    const mixed = await server.post("/for_store/add_service", [
      { name: "good", url: "http://127.0.0.1:9/mcp" },
      { name: "../bad", url: "http://127.0.0.1:9/mcp" }
    ])
    expectError(mixed, 400, "VALIDATION_ERROR")
    expect(fieldsOf(mixed)).toEqual(["[1].name"])
    expect(server.readFileText()).toBe(fileBefore)
    expect(server.running.store.forStore().listServices()).toEqual([])
  })

  it("missing or wrong-typed fields are 400 with each field named", async () => {
    const cases: Array<[string, unknown, string[]]> = [
      ["/for_store/call_tool", {}, ["tool_name"]],
      ["/for_store/call_tool", { tool_name: 5 }, ["tool_name"]],
      ["/for_store/call_tool", { tool_name: "x", args: "not an object" }, ["args"]],
      ["/for_store/call_tool", { tool_name: "x", timeout: "soon" }, ["timeout"]],
      ["/for_store/use_tool", { tool_name: "" }, ["tool_name"]],
      ["/for_store/wait_service", {}, ["client_id_or_service_name"]],
      ["/for_store/wait_service", { client_id_or_service_name: "x", raise_on_timeout: "yes" }, ["raise_on_timeout"]],
      ["/for_store/delete_service_two_step", {}, ["service_name"]],
      ["/for_store/network_check", { endpoints: "http://127.0.0.1" }, ["endpoints"]],
      ["/for_store/add_service", { name: "x" }, ["url"]],
      ["/for_store/add_service", { name: "x", url: "http://h/mcp", command: "node" }, ["url"]],
      ["/for_store/add_service", { name: "x", command: 5 }, ["command"]],
      ["/for_store/add_service", { name: "x", command: "node", args: "a b" }, ["args"]],
      ["/for_store/add_service", { name: "x", command: "node", env: { A: 1 } }, ["env.A"]],
      ["/for_store/add_service", { name: "x", url: "ftp://127.0.0.1/mcp" }, ["url"]],
      ["/for_store/add_service", { name: "x", url: "http://127.0.0.1/mcp", transport: "carrier-pigeon" }, ["transport"]],
      ["/for_store/add_service", { name: 7, url: "http://127.0.0.1/mcp" }, ["name"]],
      ["/for_store/add_service", "just a string", ["body"]],
      ["/for_store/add_service", [], ["body"]],
      ["/for_agent/a1/call_tool", { args: {} }, ["tool_name"]]
    ]
    for (const [path, body, fields] of cases) {
      const reply = await server.post(path, body)
      const label = `${path} ${JSON.stringify(body)}`
      expect(reply.status, label).toBe(400)
      expect(reply.body.error?.code, label).toBe("VALIDATION_ERROR")
      for (const f of fields) expect(fieldsOf(reply), label).toContain(f)
    }
    expect(server.readFileText()).toBe(fileBefore)
    expect(server.running.store.agentIds()).toEqual([])
  })

  it("add_service ?wait out of range is refused with 400, not clamped", async () => {
    for (const wait of ["31", "-1", "soon"]) {
      const reply = await server.post(`/for_store/add_service?wait=${wait}`, { name: "ok", url: "http://127.0.0.1:9/mcp" })
      expectError(reply, 400, "VALIDATION_ERROR")
      expect(fieldsOf(reply).join(" "), wait).toMatch(/wait/)
    }
    expect(server.readFileText()).toBe(fileBefore)
  })
})
