/**
 * Secrets are never shown: a marker secret in every place a definition
 * may hold one (env and header values, URL user-info and credential query values, credential
 * `args`, an unknown credential-looking field), in the store's scope and an agent's, with services
 * that fail and succeed (so errors, histories, events and records exist), appears in no GET route,
 * in neither event stream and in no log line; `show_mcpconfig?reveal=true` shows it. And `${VAR}`
 * references stay in the services file while the upstream receives the value.
 */
import { readFileSync } from "node:fs"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { captureLogs, type CapturedLogs } from "../../src/logging/log.js"
import { startHttpFixture, type HttpFixture } from "../fixtures/http-fixture.js"
import { stdioFixture } from "../fixtures/paths.js"
import { closedPort, endpointSpecs, fillPath, openSse, startTestServer, waitStatus, type SseStream, type TestServer } from "../support/index.js"

const MARKER = "mrkQ7x9Zs3cr3t"
const AGENT = "agent-s"

describe("a marker secret in every place of a definition appears nowhere", () => {
  let upstream: HttpFixture
  let server: TestServer
  let logs: CapturedLogs
  let events: SseStream
  let inspectEvents: SseStream

  const definitions = (port: number) => [
    {
      // Succeeds: the upstream requires the header.
      name: "good",
      url: `http://user:${MARKER}@127.0.0.1:${upstream.port}/mcp?api_key=${MARKER}&plain=1`,
      headers: { "x-api-key": MARKER },
      apiKey: MARKER,
      extra: { nested_token: MARKER }
    },
    // Fails: nothing listens there (the connection error names the URL).
    { name: "down", url: `http://${MARKER}:${MARKER}@127.0.0.1:${port}/mcp?token=${MARKER}`, headers: { authorization: `Bearer ${MARKER}` }, oauth: { client_id: "store-client", client_secret: MARKER } },
    // Fails: the fixture refuses the unknown flags, and is asked for an environment it does not get.
    (() => {
      const launch = stdioFixture("--require-env", "NOT_SET=1")
      return { name: "local", command: launch.command, args: [...launch.args, "--api-key", MARKER, `--x-token=${MARKER}`], env: { SOME_VAR: MARKER }, client_secret: MARKER }
    })()
  ]

  beforeAll(async () => {
    logs = captureLogs({ level: "debug" })
    upstream = await startHttpFixture({ requiredHeaders: { "x-api-key": MARKER } })
    // The failing services go unreachable after two attempts (their errors, histories and events
    // made), rather than respawning `local` every second for the rest of the file.
    server = await startTestServer({ monitoring: { max_reconnect_attempts: 2 } })
    events = await openSse(`${server.url}/events`)
    inspectEvents = await openSse(`${server.url}/inspect/events`)
    const port = await closedPort()
    for (const prefix of ["/for_store", `/for_agent/${AGENT}`]) {
      const reply = await server.post(`${prefix}/add_service?wait=15`, definitions(port))
      expect(reply.status, reply.text).toBe(200)
      await waitStatus(server, prefix, "good", "healthy", 15)
      await waitStatus(server, prefix, "down", ["reconnecting", "unreachable"], 15)
      await waitStatus(server, prefix, "local", ["reconnecting", "unreachable"], 15)
      const call = await server.post(`${prefix}/call_tool`, { tool_name: "good__echo", args: { text: "hello" } })
      expect(call.status, call.text).toBe(200)
    }
  }, 60_000)
  afterAll(async () => {
    events?.close()
    inspectEvents?.close()
    await server?.cleanup()
    await upstream?.stop()
    logs?.restore()
  })

  it("every GET route, both event streams and the logs", async () => {
    const bodies: Array<[string, string]> = []
    const values: Record<string, string> = { agent_id: AGENT, service_name: "down", name: "down", call_id: `call_${"A".repeat(32)}`, approval_id: `apr_${"A".repeat(22)}` }
    for (const spec of await endpointSpecs()) {
      if (spec.method !== "GET") continue
      for (const service of ["good", "down", "local"]) {
        const query = new URLSearchParams()
        for (const field of spec.query) {
          if (field.name === "name" || field.name === "service_name") query.set(field.name, service)
          else if (field.name === "agent_id") query.set(field.name, AGENT)
          // A search over every tool (search_tools): the words of the fixtures' tools, never the marker.
          else if (field.name === "q") query.set(field.name, "echo add text")
          else if (field.required) throw new Error(`${spec.path}: no value for the required ${field.name}`)
        }
        const path = `${fillPath(spec.path, { ...values, service_name: service })}?${query}`
        // A route naming no service is the same request for each of the three: read once.
        if (bodies.some(([read]) => read === path)) continue
        const reply = await server.get(path)
        expect(reply.status, `${path}: ${reply.text}`).toBeLessThan(500)
        bodies.push([path, reply.text])
      }
    }
    for (const path of ["/metrics", "/inspect/actors", "/inspect/machines", "/for_store/show_mcpconfig", `/for_agent/${AGENT}/show_mcpconfig`]) {
      const reply = await server.get(path)
      expect(reply.status, path).toBe(200)
      bodies.push([path, reply.text])
    }
    // The failures were seen: their errors are among what was read.
    const list = await server.get("/for_store/list_services")
    const down = list.body.services.find((s: { name: string }) => s.name === "down")
    expect(down.last_error).toMatch(/127\.0\.0\.1/)
    expect(down.url).toContain("***:***@127.0.0.1")
    expect(down.url).toContain("token=***")
    const local = list.body.services.find((s: { name: string }) => s.name === "local")
    expect(local.args).toEqual(expect.arrayContaining(["--api-key", "***", "--x-token=***"]))
    const info = await server.get("/for_store/get_service_info?name=good")
    expect(info.body.service.config).toMatchObject({ headers: { "x-api-key": "***" }, apiKey: "***", extra: { nested_token: "***" } })
    expect(info.body.service.config.url).toBe(`http://***:***@127.0.0.1:${upstream.port}/mcp?api_key=***&plain=1`)
    for (const [path, body] of bodies) expect(body.includes(MARKER), `${path} shows the marker: ${body.slice(0, 500)}`).toBe(false)
    expect(events.events.length).toBeGreaterThan(0)
    expect(events.text().includes(MARKER), "/events").toBe(false)
    expect(inspectEvents.events.length).toBeGreaterThan(0)
    expect(inspectEvents.text().includes(MARKER), "/inspect/events").toBe(false)
    expect(logs.lines.length).toBeGreaterThan(0)
    expect(logs.lines.filter((l) => l.includes(MARKER))).toEqual([])
  })

  it("show_mcpconfig?reveal=true shows the file as written", async () => {
    const reply = await server.get("/for_store/show_mcpconfig?reveal=true")
    expect(reply.body.config).toEqual(server.readFile())
    expect(reply.text).toContain(MARKER)
  })
})

describe("${VAR} references", () => {
  let upstream: HttpFixture
  let server: TestServer
  const VALUE = "v4lue-from-env"

  beforeAll(async () => {
    process.env["MCPSTORE_TEST_TOKEN"] = VALUE
    upstream = await startHttpFixture({ requiredHeaders: { authorization: `Bearer ${VALUE}`, "x-file": "from-envfile" } })
    server = await startTestServer()
  }, 30_000)
  afterAll(async () => {
    delete process.env["MCPSTORE_TEST_TOKEN"]
    await server?.cleanup()
    await upstream?.stop()
  })

  it("the file keeps the reference while the upstream receives the value (header, env, envFile)", async () => {
    const { writeFileSync } = await import("node:fs")
    writeFileSync(`${server.dir}/svc.env`, "FILE_VALUE=from-envfile\n")
    // The fixture compares its environment with its argument: both expanded, or it exits.
    const launch = stdioFixture("--require-env", "TOKEN_IN_ENV=${MCPSTORE_TEST_TOKEN}")
    const reply = await server.post("/for_store/add_service?wait=15", [
      {
        name: "remote",
        url: `http://127.0.0.1:\${env:MCPSTORE_TEST_PORT:-${upstream.port}}/mcp`,
        headers: { Authorization: "Bearer ${MCPSTORE_TEST_TOKEN}", "x-file": "${FILE_VALUE}" },
        envFile: "svc.env"
      },
      { name: "local", command: launch.command, args: launch.args, env: { TOKEN_IN_ENV: "${env:MCPSTORE_TEST_TOKEN}" } }
    ])
    expect(reply.body.services?.map((s: { status: string }) => s.status), reply.text).toEqual(["healthy", "healthy"])
    const onDisk = readFileSync(server.file, "utf8")
    expect(onDisk).toContain('"Bearer ${MCPSTORE_TEST_TOKEN}"')
    expect(onDisk).toContain('"${env:MCPSTORE_TEST_TOKEN}"')
    expect(onDisk).not.toContain(VALUE)
    const info = await server.get("/for_store/get_service_info?name=remote")
    expect(info.body.service.config.headers).toEqual({ Authorization: "Bearer ${MCPSTORE_TEST_TOKEN}", "x-file": "${FILE_VALUE}" })
    const local = await server.get("/for_store/get_service_info?name=local")
    expect(local.body.service.config.env).toEqual({ TOKEN_IN_ENV: "${env:MCPSTORE_TEST_TOKEN}" })
  })

  it("an unset variable without a default: unreachable, last_error names it, a hint, never a value", async () => {
    const reply = await server.post("/for_store/add_service?wait=15", {
      name: "unset",
      url: `${"${MCPSTORE_TEST_NO_SUCH_VAR}"}/mcp`,
      headers: { "x-token": "${MCPSTORE_TEST_TOKEN}" }
    })
    expect(reply.status, reply.text).toBe(200)
    await waitStatus(server, "/for_store", "unset", "unreachable", 15)
    const info = await server.get("/for_store/get_service_info?name=unset")
    expect(info.body.service.last_error).toContain("MCPSTORE_TEST_NO_SUCH_VAR")
    expect(info.body.service.hint).toContain("MCPSTORE_TEST_NO_SUCH_VAR")
    expect(info.text).not.toContain(VALUE)
  })
})
