// The protocol's reference server (@modelcontextprotocol/server-everything), a server this project
// did not write, registered over stdio and over Streamable HTTP: healthy, its tools listed, `echo`
// and a structured-output tool called through the HTTP API.
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { everythingStdio } from "../fixtures/paths.js"
import { startEverythingHttp, type EverythingHttp } from "../fixtures/everything-http.js"
import { localService, startTestServer, type TestServer } from "../support/index.js"

describe("server-everything over stdio and Streamable HTTP", { timeout: 10_000 }, () => {
  let upstream: EverythingHttp
  let server: TestServer

  beforeAll(async () => {
    upstream = await startEverythingHttp("streamableHttp")
    server = await startTestServer()
  }, 20_000)
  afterAll(async () => {
    await server?.cleanup()
    await upstream?.stop()
  }, 15_000)

  it("registers both and they become healthy", { timeout: 25_000 }, async () => {
    const reply = await server.post("/for_store/add_service?wait=20", [
      localService("ev-stdio", everythingStdio),
      { name: "ev-http", url: upstream.url }
    ])
    expect(reply.status).toBe(200)
    expect(reply.body.added).toEqual(["ev-stdio", "ev-http"])
    const byName = Object.fromEntries(reply.body.services.map((s: { name: string }) => [s.name, s]))
    expect(byName["ev-stdio"]).toMatchObject({ status: "healthy", transport_type: "stdio" })
    expect(byName["ev-http"]).toMatchObject({ status: "healthy", transport_type: "streamable_http", url: upstream.url })
  })

  it.each(["ev-stdio", "ev-http"])("%s: tools listed, echo called", async (name) => {
    const wait = await server.post("/for_store/wait_service", { client_id_or_service_name: name, timeout: 10 })
    expect(wait.body.data.result).toBe(true)

    const listTools = await server.get(`/for_store/list_tools?service_name=${name}`)
    expect(listTools.status).toBe(200)
    const tools: Array<{ name: string; original_name: string; service_name: string }> = listTools.body.tools
    expect(tools.length).toBeGreaterThan(5)
    expect(tools.every((t) => t.service_name === name)).toBe(true)
    const names = tools.map((t) => t.original_name)
    expect(names).toEqual(expect.arrayContaining(["echo", "get-sum", "get-structured-content"]))
    expect(tools.find((t) => t.original_name === "echo")?.name).toBe(`${name}__echo`)

    const list = await server.get("/for_store/list_services")
    const listed = list.body.services.find((s: { name: string }) => s.name === name)
    expect(listed.tool_count).toBe(tools.length)

    const echo = await server.post("/for_store/call_tool", { tool_name: `${name}__echo`, args: { message: "hi from the store" } })
    expect(echo.status).toBe(200)
    expect(echo.body).toMatchObject({ success: true, result: "Echo: hi from the store", is_error: false, original_name: "echo", service_name: name })

    const weather = await server.post("/for_store/call_tool", {
      tool_name: `${name}__get-structured-content`,
      args: { location: "Chicago" }
    })
    expect(weather.status).toBe(200)
    expect(weather.body.structured_content).toMatchObject({ temperature: 36, humidity: 82 })
    expect(weather.body.result).toEqual(weather.body.structured_content)
  })
})
