// OpenTelemetry traces of a real store process, received by a real OTLP/HTTP receiver: a small HTTP
// server that takes what the SDK's OTLP/HTTP exporter sends (JSON, as `exporter-trace-otlp-http`
// encodes it) and keeps the spans. Checked: the tree a REST call makes (the caller's traceparent →
// the store's request span → the call's client span to the upstream, a wait span when the service
// was still connecting), the MCP and GenAI conventions' attributes, the ids the upstream saw (in its
// `_meta` over stdio and HTTP, and in the HTTP headers), the answer's and the record's ids, a
// wait_service's wait span, an MCP
// client's tools/call span, the spans of the other MCP methods (a 2025 session's and a 2026-07-28
// request's resources/read and prompts/get: the server span, the upstream request's client span
// under it, the context the upstream saw; a failing read's error.type; initialize and
// server/discover under the HTTP traceparent header), the resource from OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES,
// OTEL_EXPORTER_OTLP_ENDPOINT alone turning tracing on, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT taken as
// the whole traces URL and over the base one, and a collector that never answers leaving
// every call and the store's stop unharmed (the stop held at most until the exporter's time-out,
// which OTEL_EXPORTER_OTLP_TIMEOUT sets shorter than the default 10 s here).
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { createServer, type IncomingMessage, type Server } from "node:http"
import { createServer as createTcpServer, type AddressInfo, type Socket } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { gunzipSync } from "node:zlib"
import { afterAll, describe, expect, it } from "vitest"
import { SSEClientTransport } from "@modelcontextprotocol/sdk/client/sse.js"
import { startEraHttpFixture } from "../fixtures/era-http.js"
import { startHttpFixture, type HttpFixture } from "../fixtures/http-fixture.js"
import { stdioFixture } from "../fixtures/paths.js"
import { addService, closedPort, eventually, modernEnvelope, modernRequest, spawnStore, within, type StoreProcess } from "../support/index.js"

const TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
const PARENT = "00f067aa0ba902b7"
const TRACEPARENT = `00-${TRACE}-${PARENT}-01`
/** The exporter's time-out the store with a silent collector is given, and the SDK's default. */
const EXPORT_TIMEOUT_MS = 4_000
const DEFAULT_EXPORT_TIMEOUT_MS = 10_000

/** An OTLP attribute value as the JSON encoding carries it. */
type AnyValue = { stringValue?: string; intValue?: number | string; boolValue?: boolean; doubleValue?: number }

/** One received span, its attributes as plain values. */
interface ReceivedSpan {
  readonly traceId: string
  readonly spanId: string
  readonly parentSpanId: string | undefined
  readonly name: string
  /** OTLP's numbering: 1 internal, 2 server, 3 client. */
  readonly kind: number
  readonly attributes: Record<string, string | number | boolean>
  readonly status: { readonly code?: number; readonly message?: string }
  readonly resource: Record<string, string | number | boolean>
}

const plain = (v: AnyValue): string | number | boolean =>
  v.stringValue ?? (v.intValue !== undefined ? Number(v.intValue) : undefined) ?? v.boolValue ?? v.doubleValue ?? ""

const attributesOf = (list: ReadonlyArray<{ key: string; value: AnyValue }> | undefined): Record<string, string | number | boolean> =>
  Object.fromEntries((list ?? []).map((a) => [a.key, plain(a.value)]))

/** The OTLP/HTTP receiver: POST /v1/traces, JSON (gzip or not), answered 200 with an empty partial success. */
interface Receiver {
  readonly url: string
  readonly spans: Array<ReceivedSpan>
  /** The content types the exporter sent. */
  readonly contentTypes: Set<string>
  stop(): Promise<void>
}

const startReceiver = async (): Promise<Receiver> => {
  const spans: Array<ReceivedSpan> = []
  const contentTypes = new Set<string>()
  const read = async (req: IncomingMessage): Promise<Buffer> => {
    const chunks: Buffer[] = []
    for await (const chunk of req) chunks.push(chunk as Buffer)
    const body = Buffer.concat(chunks)
    return req.headers["content-encoding"] === "gzip" ? gunzipSync(body) : body
  }
  const server: Server = createServer((req, res) => {
    void (async () => {
      if (req.method !== "POST" || req.url !== "/v1/traces") return void res.writeHead(404).end()
      contentTypes.add(String(req.headers["content-type"]))
      const request = JSON.parse((await read(req)).toString("utf8")) as {
        resourceSpans?: Array<{
          resource?: { attributes?: Array<{ key: string; value: AnyValue }> }
          scopeSpans?: Array<{ spans?: Array<{ traceId: string; spanId: string; parentSpanId?: string; name: string; kind: number; attributes?: Array<{ key: string; value: AnyValue }>; status?: { code?: number; message?: string } }> }>
        }>
      }
      for (const rs of request.resourceSpans ?? []) {
        const resource = attributesOf(rs.resource?.attributes)
        for (const ss of rs.scopeSpans ?? []) {
          for (const s of ss.spans ?? []) {
            spans.push({
              traceId: s.traceId,
              spanId: s.spanId,
              parentSpanId: s.parentSpanId === "" ? undefined : s.parentSpanId,
              name: s.name,
              kind: s.kind,
              attributes: attributesOf(s.attributes),
              status: s.status ?? {},
              resource
            })
          }
        }
      }
      res.writeHead(200, { "content-type": "application/json" }).end("{}")
    })().catch(() => res.writeHead(400).end())
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  const port = (server.address() as AddressInfo).port
  return {
    url: `http://127.0.0.1:${port}`,
    spans,
    contentTypes,
    stop: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve())
        server.closeAllConnections()
      })
  }
}

/**
 * A collector that is there and never answers: a TCP server that accepts every connection, reads,
 * and never writes a byte (as test/fixtures/silent-tcp-server.ts), keeping the first line of each
 * connection's request (its method and path).
 */
const startSilentCollector = async (): Promise<{ readonly port: number; requestLines(): ReadonlyArray<string>; stop(): Promise<void> }> => {
  const sockets = new Set<Socket>()
  const lines: string[] = []
  const server = createTcpServer((socket) => {
    sockets.add(socket)
    let head = ""
    socket.on("data", (chunk: Buffer) => {
      if (head.includes("\r\n")) return
      head += chunk.toString("latin1")
      if (head.includes("\r\n")) lines.push(head.slice(0, head.indexOf("\r\n")))
    })
    socket.on("error", () => {})
    socket.once("close", () => sockets.delete(socket))
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  return {
    port: (server.address() as AddressInfo).port,
    requestLines: () => lines,
    stop: async () => {
      for (const socket of sockets) socket.destroy()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    }
  }
}

/** The spans of `traceId` once `count` of them have arrived (each export is at most 50 ms away). */
const spansOf = async (receiver: Receiver, traceId: string, count: number): Promise<Array<ReceivedSpan>> => {
  await eventually(() => receiver.spans.filter((s) => s.traceId === traceId).length >= count, 15_000)
  return receiver.spans.filter((s) => s.traceId === traceId)
}

/** The one span named `name` (of OTLP kind `kind`, when given: a server span and its client span may share a name). */
const only = (spans: ReadonlyArray<ReceivedSpan>, name: string, kind?: number): ReceivedSpan => {
  const found = spans.filter((s) => s.name === name && (kind === undefined || s.kind === kind))
  expect(found.map((s) => s.name), `one span named ${name} among ${spans.map((s) => s.name).join(", ")}`).toEqual([name])
  return found[0]!
}

const textOf = (body: { result: unknown }): Record<string, string> => JSON.parse(body.result as string) as Record<string, string>

describe("OpenTelemetry traces over OTLP/HTTP", () => {
  const cleanups: Array<() => Promise<unknown>> = []
  const dir = mkdtempSync(join(tmpdir(), "mcp-store-tracing-"))
  afterAll(async () => {
    for (const cleanup of cleanups.reverse()) await cleanup().catch(() => undefined)
    rmSync(dir, { recursive: true, force: true })
  })

  /** A store process on a services file of its own, exporting to `endpoint` (by the flag, or by the environment alone). */
  const store = async (name: string, options: { readonly flag?: string; readonly env?: Record<string, string> }): Promise<StoreProcess> => {
    const file = join(dir, `${name}.json`)
    writeFileSync(file, JSON.stringify({ mcpServers: {} }))
    const running = await spawnStore({
      configFile: file,
      extraArgs: options.flag === undefined ? [] : ["--otlp-endpoint", options.flag],
      // Exported every 50 ms, so the test does not wait the SDK's default 5 s.
      env: { OTEL_BSP_SCHEDULE_DELAY: "50", ...options.env },
      startTimeoutMs: 60_000
    })
    cleanups.push(() => running.kill())
    return running
  }

  let shared: Promise<{ receiver: Receiver; server: StoreProcess; fixture: HttpFixture }> | undefined
  /** One receiver, one HTTP upstream (with its `meta` and `trace_headers` tools) and one store exporting by the flag. */
  const setup = () =>
    (shared ??= (async () => {
      const receiver = await startReceiver()
      cleanups.push(() => receiver.stop())
      const fixture = await startHttpFixture({ server: { metaTool: true, headersTool: true, catalog: true } })
      cleanups.push(() => fixture.stop())
      const server = await store("flag", { flag: `${receiver.url}/`, env: { OTEL_SERVICE_NAME: "traced-store", OTEL_RESOURCE_ATTRIBUTES: "deployment.environment.name=test,team=tools" } })
      await addService(server, "/for_store", { name: "fx", url: fixture.url })
      return { receiver, server, fixture }
    })())

  it("a REST call: the request span under the caller's traceparent, the call's client span under it with the MCP and GenAI attributes; the upstream, the answer and the record carry the call's span", async () => {
    const { receiver, server } = await setup()
    const headers = { "content-type": "application/json", traceparent: TRACEPARENT, tracestate: "vendor=abc", baggage: "user=alice" }
    const reply = await server.request("POST", "/for_store/call_tool", { body: JSON.stringify({ tool_name: "fx__meta" }), headers })
    expect(reply.status).toBe(200)
    expect(reply.body.trace_id).toBe(TRACE)
    const callSpanId = reply.body.span_id as string
    // The upstream was sent the call's span as its parent, in `_meta`.
    expect(textOf(reply.body)).toEqual({ traceparent: `00-${TRACE}-${callSpanId}-01`, tracestate: "vendor=abc", baggage: "user=alice" })

    const spans = await spansOf(receiver, TRACE, 2)
    const request = only(spans, "POST /for_store/call_tool")
    expect(request).toMatchObject({ kind: 2, parentSpanId: PARENT })
    expect(request.attributes).toMatchObject({ "http.request.method": "POST", "http.route": "/for_store/call_tool", "http.response.status_code": 200 })
    expect(request.attributes["error.type"]).toBeUndefined()
    const call = only(spans, "tools/call meta")
    expect(call).toMatchObject({ kind: 3, spanId: callSpanId, parentSpanId: request.spanId })
    expect(call.attributes).toEqual({
      "mcp.method.name": "tools/call",
      "gen_ai.operation.name": "execute_tool",
      "gen_ai.tool.name": "meta",
      "mcp.protocol.version": expect.any(String),
      "network.transport": "tcp",
      "mcp_store.scope": "store",
      "mcp_store.service.name": "fx",
      "mcp_store.tool.callable_name": "fx__meta",
      "mcp_store.outcome": "success"
    })
    expect(call.status.code ?? 0).toBe(0)
    // The resource: the SDK's, with OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES over the store's own.
    expect(call.resource).toMatchObject({ "service.name": "traced-store", "deployment.environment.name": "test", team: "tools", "telemetry.sdk.language": "nodejs" })
    expect(call.resource["service.version"]).toMatch(/^\d+\.\d+\.\d+/)
    expect([...receiver.contentTypes]).toEqual(["application/json"])

    const records = await server.get("/for_store/tool_records?limit=1")
    expect(records.body.executions[0]).toMatchObject({ tool_name: "meta", trace_id: TRACE, span_id: callSpanId })
  })

  it("an HTTP upstream gets the call's span in its traceparent header too; the router's call_tool (a query string) makes the same tree", async () => {
    const { receiver, server } = await setup()
    const trace = "0af7651916cd43dd8448eb211c80319c"
    const reply = await server.request("POST", "/for_store/call_tool?via=router", {
      body: JSON.stringify({ tool_name: "fx__trace_headers" }),
      headers: { "content-type": "application/json", traceparent: `00-${trace}-b7ad6b7169203331-01`, tracestate: "congo=t61rcWkgMzE" }
    })
    expect(reply.status).toBe(200)
    expect(textOf(reply.body)).toEqual({ traceparent: `00-${trace}-${reply.body.span_id}-01`, tracestate: "congo=t61rcWkgMzE" })
    const spans = await spansOf(receiver, trace, 2)
    const request = only(spans, "POST /for_store/call_tool")
    expect(request.parentSpanId).toBe("b7ad6b7169203331")
    expect(only(spans, "tools/call trace_headers")).toMatchObject({ spanId: reply.body.span_id, parentSpanId: request.spanId })

    // A traceparent that is not valid (an all-zero parent) and a tracestate over its bound: a trace of the store's, the state dropped.
    const bad = await server.request("POST", "/for_store/call_tool", {
      body: JSON.stringify({ tool_name: "fx__trace_headers" }),
      headers: { "content-type": "application/json", traceparent: `00-${trace}-${"0".repeat(16)}-01`, tracestate: `v=${"a".repeat(600)}` }
    })
    expect(bad.status).toBe(200)
    expect(bad.body.trace_id).not.toBe(trace)
    expect(textOf(bad.body)).toEqual({ traceparent: `00-${bad.body.trace_id}-${bad.body.span_id}-01` })
    const own = await spansOf(receiver, bad.body.trace_id as string, 2)
    expect(only(own, "POST /for_store/call_tool").parentSpanId).toBeUndefined()
  })

  it("wait_service: its request span, and the wait's span under it", async () => {
    const { receiver, server } = await setup()
    const trace = "99999999999999999999999999999999"
    const reply = await server.request("POST", "/for_store/wait_service", {
      body: JSON.stringify({ client_id_or_service_name: "fx", status: "healthy", timeout: 5 }),
      headers: { "content-type": "application/json", traceparent: `00-${trace}-aaaaaaaaaaaaaaaa-01` }
    })
    expect(reply.status).toBe(200)
    const spans = await spansOf(receiver, trace, 2)
    const request = only(spans, "POST /for_store/wait_service")
    expect(request.parentSpanId).toBe("aaaaaaaaaaaaaaaa")
    const wait = only(spans, "wait fx")
    expect(wait).toMatchObject({ kind: 1, parentSpanId: request.spanId })
    expect(wait.attributes).toMatchObject({ "mcp_store.wait.services": "fx", "mcp_store.wait.until": "healthy", "mcp_store.outcome": "reached", "mcp_store.scope": "store" })
  })

  it("a stdio upstream: the context in _meta, network.transport pipe; a tool error is error.type tool_error with an error status; a refused call has a span of its own", async () => {
    const { receiver, server } = await setup()
    await addService(server, "/for_store", { name: "local", ...stdioFixture("--meta-tool") })
    const trace = "11111111111111111111111111111111"
    const headers = { "content-type": "application/json", traceparent: `00-${trace}-2222222222222222-01` }
    const meta = await server.request("POST", "/for_store/call_tool", { body: JSON.stringify({ tool_name: "local__meta" }), headers })
    expect(meta.status).toBe(200)
    expect(textOf(meta.body)).toEqual({ traceparent: `00-${trace}-${meta.body.span_id}-01` })
    const failed = await server.request("POST", "/for_store/call_tool", { body: JSON.stringify({ tool_name: "local__fail" }), headers })
    expect(failed.status).toBe(200)
    expect(failed.body.is_error).toBe(true)
    const unknown = await server.request("POST", "/for_store/call_tool", { body: JSON.stringify({ tool_name: "local__nope" }), headers })
    expect(unknown.status).toBe(404)

    const spans = await spansOf(receiver, trace, 6)
    expect(only(spans, "tools/call meta").attributes).toMatchObject({ "network.transport": "pipe", "mcp_store.service.name": "local", "mcp_store.outcome": "success" })
    const fail = only(spans, "tools/call fail")
    expect(fail.attributes).toMatchObject({ "error.type": "tool_error", "mcp_store.outcome": "tool_error" })
    expect(fail.status).toMatchObject({ code: 2, message: "failure requested" })
    // Refused before any upstream was asked: an internal span named by the method alone.
    const refused = only(spans, "tools/call")
    expect(refused.kind).toBe(1)
    expect(refused.attributes).toMatchObject({ "error.type": "ToolNotFound", "gen_ai.tool.name": "local__nope" })
    expect(refused.status.code).toBe(2)
    // Its request span says 404 without calling it the server's error.
    const requests = spans.filter((s) => s.name === "POST /for_store/call_tool")
    expect(requests.map((s) => s.attributes["http.response.status_code"]).sort()).toEqual([200, 200, 404])
    expect(requests.every((s) => s.attributes["error.type"] === undefined)).toBe(true)
  })

  it("a call to a service still connecting: a wait span under the call's span", async () => {
    const { receiver, server } = await setup()
    // Added without waiting: the stdio server takes a while to start, and the call waits for it.
    const added = await server.post("/for_store/add_service", { name: "late", ...stdioFixture("--meta-tool") })
    expect(added.status).toBe(200)
    const trace = "33333333333333333333333333333333"
    const reply = await server.request("POST", "/for_store/call_tool", {
      body: JSON.stringify({ tool_name: "late__echo", args: { text: "hi" } }),
      headers: { "content-type": "application/json", traceparent: `00-${trace}-4444444444444444-01` }
    })
    expect(reply.status).toBe(200)
    const spans = await spansOf(receiver, trace, 3)
    const call = only(spans, "tools/call echo")
    const wait = only(spans, "wait late")
    expect(wait).toMatchObject({ kind: 1, parentSpanId: call.spanId })
    expect(wait.attributes).toMatchObject({ "mcp_store.wait.services": "late", "mcp_store.outcome": "ready" })
  })

  it("an MCP client's tools/call: the server span under its _meta traceparent, with the method, session and request id; the call's span under it", async () => {
    const { receiver, server } = await setup()
    const client = new Client({ name: "tracing-test", version: "1.0.0" })
    cleanups.push(() => client.close())
    const transport = new StreamableHTTPClientTransport(new URL(`${server.url}/mcp`))
    await within(client.connect(transport), 10_000, "connect /mcp")
    const trace = "55555555555555555555555555555555"
    const result = await client.callTool({ name: "fx__meta", arguments: {}, _meta: { traceparent: `00-${trace}-6666666666666666-01` } })
    const upstream = JSON.parse((result.content as Array<{ text: string }>)[0]!.text) as Record<string, string>
    const spans = await spansOf(receiver, trace, 2)
    const face = only(spans, "tools/call fx__meta")
    expect(face).toMatchObject({ kind: 2, parentSpanId: "6666666666666666" })
    expect(face.attributes).toMatchObject({ "mcp.method.name": "tools/call", "gen_ai.tool.name": "fx__meta", "gen_ai.operation.name": "execute_tool", "mcp.session.id": transport.sessionId, "jsonrpc.request.id": expect.any(String) })
    const call = only(spans, "tools/call meta")
    expect(call.parentSpanId).toBe(face.spanId)
    expect(upstream["traceparent"]).toBe(`00-${trace}-${call.spanId}-01`)

    // A made-up tool name stays out of the span's name (a hostile client cannot mint span names).
    const hostile = "77777777777777777777777777777777"
    const refused = await client.callTool({ name: `made_up_${"x".repeat(2_000)}`, arguments: {}, _meta: { traceparent: `00-${hostile}-8888888888888888-01` } })
    expect(refused.isError).toBe(true)
    const refusedSpans = await spansOf(receiver, hostile, 2)
    expect(refusedSpans.map((s) => s.name).sort()).toEqual(["tools/call", "tools/call"])
    const refusedFace = refusedSpans.find((s) => s.kind === 2)!
    expect(refusedFace.attributes["error.type"]).toBe("ToolNotFound")
    // Its attribute values are cut.
    expect(String(refusedFace.attributes["gen_ai.tool.name"]).length).toBe(512)
  })

  /** What the fixture's `mem://meta` and prompt `meta` saw of a request: its `_meta` and its `traceparent` header. */
  type Seen = { meta: Record<string, string>; traceparent?: string }

  /** The server span of an MCP method and its upstream request's client span under it, the context the upstream was sent that of the client span. */
  const methodTree = (spans: ReadonlyArray<ReceivedSpan>, server: string, client: string, parent: string, seen?: Seen) => {
    const face = only(spans, server, 2)
    expect(face).toMatchObject({ kind: 2, parentSpanId: parent })
    const upstream = only(spans, client, 3)
    expect(upstream).toMatchObject({ kind: 3, parentSpanId: face.spanId })
    expect(upstream.attributes).toMatchObject({ "mcp_store.service.name": "fx", "mcp_store.scope": "store", "network.transport": "tcp", "mcp.protocol.version": expect.any(String) })
    if (seen !== undefined) {
      expect(seen.meta["traceparent"]).toBe(`00-${face.traceId}-${upstream.spanId}-01`)
      expect(seen.traceparent).toBe(`00-${face.traceId}-${upstream.spanId}-01`)
    }
    return { face, upstream }
  }

  it("a 2025 session's resources/read and prompts/get: the server span under the _meta traceparent, the upstream request's client span under it, the upstream sent its context; a failing read's error.type; initialize under the header", async () => {
    const { receiver, server } = await setup()
    const headerTrace = "abababababababababababababababab"
    const client = new Client({ name: "tracing-test", version: "1.0.0" })
    cleanups.push(() => client.close())
    const transport = new StreamableHTTPClientTransport(new URL(`${server.url}/mcp`), { requestInit: { headers: { traceparent: `00-${headerTrace}-cdcdcdcdcdcdcdcd-01` } } })
    await within(client.connect(transport), 10_000, "connect /mcp")
    const trace = "12121212121212121212121212121212"
    const _meta = { traceparent: `00-${trace}-3434343434343434-01` }
    const read = await client.readResource({ uri: "mem://meta", _meta })
    const prompt = await client.getPrompt({ name: "fx__meta", _meta })
    const missing = await client.readResource({ uri: "mem://notes/missing", _meta }).then(
      () => undefined,
      (e: unknown) => e as { code?: number }
    )
    expect(missing?.code).toBe(-32002)

    const spans = await spansOf(receiver, trace, 6)
    const reads = spans.filter((s) => s.name === "resources/read" && s.kind === 2)
    expect(reads).toHaveLength(2)
    const good = reads.find((s) => s.attributes["mcp.resource.uri"] === "mem://meta")!
    const readSeen = JSON.parse((read.contents[0] as { text: string }).text) as Seen
    const readUpstream = spans.find((s) => s.kind === 3 && s.parentSpanId === good.spanId)!
    expect(readUpstream).toMatchObject({ name: "resources/read" })
    expect(readSeen.meta["traceparent"]).toBe(`00-${trace}-${readUpstream.spanId}-01`)
    expect(readSeen.traceparent).toBe(`00-${trace}-${readUpstream.spanId}-01`)
    expect(good).toMatchObject({ parentSpanId: "3434343434343434" })
    expect(good.attributes).toEqual({
      "mcp.method.name": "resources/read",
      "mcp.session.id": transport.sessionId,
      "jsonrpc.request.id": expect.any(String),
      "mcp.protocol.version": expect.stringMatching(/^\d{4}-\d{2}-\d{2}$/),
      "mcp.resource.uri": "mem://meta",
      "network.transport": "tcp",
      "network.protocol.name": "http"
    })
    expect(readUpstream.attributes).toMatchObject({ "mcp.method.name": "resources/read", "mcp.resource.uri": "mem://meta", "mcp_store.service.name": "fx" })

    const promptSeen = JSON.parse((prompt.messages[0]!.content as { text: string }).text) as Seen
    const { face: promptFace, upstream: promptUpstream } = methodTree(spans, "prompts/get fx__meta", "prompts/get meta", "3434343434343434", promptSeen)
    expect(promptFace.attributes).toMatchObject({ "mcp.method.name": "prompts/get", "gen_ai.prompt.name": "fx__meta", "mcp.session.id": transport.sessionId })
    expect(promptUpstream.attributes).toMatchObject({ "mcp.method.name": "prompts/get", "gen_ai.prompt.name": "meta" })

    // The failing read: error.type the JSON-RPC code (the server span), the store's error class (the client span).
    const bad = reads.find((s) => s.attributes["mcp.resource.uri"] === "mem://notes/missing")!
    expect(bad.attributes).toMatchObject({ "error.type": "-32002", "rpc.response.status_code": "-32002" })
    expect(bad.status.code).toBe(2)
    const badUpstream = spans.find((s) => s.kind === 3 && s.parentSpanId === bad.spanId)!
    expect(badUpstream.attributes).toMatchObject({ "error.type": "ResourceNotFound", "rpc.response.status_code": "-32002" })
    expect(badUpstream.status.code).toBe(2)

    // Without trace context in `_meta`: the HTTP request's traceparent header is the parent (initialize, tools/list).
    const headed = await spansOf(receiver, headerTrace, 1)
    const init = only(headed, "initialize")
    expect(init).toMatchObject({ kind: 2, parentSpanId: "cdcdcdcdcdcdcdcd" })
    expect(init.attributes).toMatchObject({ "mcp.method.name": "initialize", "mcp.session.id": transport.sessionId, "mcp.protocol.version": expect.any(String) })
  })

  it("a 2026-07-28 request's resources/read and prompts/get: the same tree; a failing read's error.type; server/discover under the header", async () => {
    const { receiver, server } = await setup()
    const trace = "56565656565656565656565656565656"
    const modern = async (method: string, params: Record<string, unknown>, name: string | undefined, headers: Record<string, string> = {}) =>
      (await modernRequest(`${server.url}/mcp`, method, params, { headers: { "mcp-name": name ?? null, ...headers }, id: 9 })).response as { result?: Record<string, unknown>; error?: { code: number } }
    const _meta = { traceparent: `00-${trace}-7878787878787878-01` }
    const read = await modern("resources/read", { uri: "mem://meta", _meta }, "mem://meta")
    const readSeen = JSON.parse((read.result!["contents"] as Array<{ text: string }>)[0]!.text) as Seen
    const prompt = await modern("prompts/get", { name: "fx__meta", _meta }, "fx__meta")
    const promptSeen = JSON.parse((prompt.result!["messages"] as Array<{ content: { text: string } }>)[0]!.content.text) as Seen
    const missing = await modern("resources/read", { uri: "mem://notes/missing", _meta }, "mem://notes/missing")
    expect(missing.error?.code).toBe(-32602)

    const spans = await spansOf(receiver, trace, 6)
    const reads = spans.filter((s) => s.name === "resources/read" && s.kind === 2)
    expect(reads).toHaveLength(2)
    const good = reads.find((s) => s.attributes["mcp.resource.uri"] === "mem://meta")!
    expect(good).toMatchObject({ parentSpanId: "7878787878787878" })
    expect(good.attributes).toMatchObject({ "mcp.method.name": "resources/read", "jsonrpc.request.id": "9", "mcp.protocol.version": "2026-07-28" })
    expect(good.attributes["mcp.session.id"]).toBeUndefined()
    const readUpstream = spans.find((s) => s.kind === 3 && s.parentSpanId === good.spanId)!
    expect(readSeen.meta["traceparent"]).toBe(`00-${trace}-${readUpstream.spanId}-01`)
    expect(readSeen.traceparent).toBe(`00-${trace}-${readUpstream.spanId}-01`)
    const { face: promptFace } = methodTree(spans, "prompts/get fx__meta", "prompts/get meta", "7878787878787878", promptSeen)
    expect(promptFace.attributes).toMatchObject({ "gen_ai.prompt.name": "fx__meta", "mcp.protocol.version": "2026-07-28" })
    const bad = reads.find((s) => s.attributes["mcp.resource.uri"] === "mem://notes/missing")!
    expect(bad.attributes).toMatchObject({ "error.type": "-32602", "rpc.response.status_code": "-32602" })
    expect(bad.status.code).toBe(2)

    // server/discover, its parent the traceparent header (its `_meta` has none).
    const headerTrace = "9a9a9a9a9a9a9a9a9a9a9a9a9a9a9a9a"
    const discovered = await modern("server/discover", {}, undefined, { traceparent: `00-${headerTrace}-bcbcbcbcbcbcbcbc-01` })
    expect(discovered.result).toBeDefined()
    const discover = only(await spansOf(receiver, headerTrace, 1), "server/discover")
    expect(discover).toMatchObject({ kind: 2, parentSpanId: "bcbcbcbcbcbcbcbc" })
    expect(discover.attributes).toMatchObject({ "mcp.method.name": "server/discover", "mcp.protocol.version": "2026-07-28" })
    expect(discover.attributes["error.type"]).toBeUndefined()

    // subscriptions/listen: its span ends as its stream opens, not when the stream ends.
    const listenTrace = "0e0e0e0e0e0e0e0e0e0e0e0e0e0e0e0e"
    const abort = new AbortController()
    const stream = await fetch(`${server.url}/mcp`, {
      method: "POST",
      signal: abort.signal,
      headers: { "content-type": "application/json", accept: "application/json, text/event-stream", "mcp-protocol-version": "2026-07-28", "mcp-method": "subscriptions/listen" },
      body: JSON.stringify({ jsonrpc: "2.0", id: 10, method: "subscriptions/listen", params: { notifications: { toolsListChanged: true }, _meta: { ...modernEnvelope(), traceparent: `00-${listenTrace}-1f1f1f1f1f1f1f1f-01` } } })
    })
    expect(stream.headers.get("content-type")).toMatch(/^text\/event-stream/)
    const listen = only(await spansOf(receiver, listenTrace, 1), "subscriptions/listen")
    abort.abort()
    expect(listen).toMatchObject({ kind: 2, parentSpanId: "1f1f1f1f1f1f1f1f" })
    expect(listen.attributes).toMatchObject({ "mcp.method.name": "subscriptions/listen", "mcp_store.stream": "opened" })
    expect(listen.attributes["error.type"]).toBeUndefined()
  })

  it("a legacy /sse session's read and a REST read_resource: the same tree under the request's span", async () => {
    const { receiver, server } = await setup()
    const client = new Client({ name: "tracing-sse", version: "1.0.0" })
    cleanups.push(() => client.close())
    await within(client.connect(new SSEClientTransport(new URL(`${server.url}/sse`))), 10_000, "connect /sse")
    const trace = "a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1"
    const read = await client.readResource({ uri: "mem://meta", _meta: { traceparent: `00-${trace}-b2b2b2b2b2b2b2b2-01` } })
    const seen = JSON.parse((read.contents[0] as { text: string }).text) as Seen
    const { face } = methodTree(await spansOf(receiver, trace, 2), "resources/read", "resources/read", "b2b2b2b2b2b2b2b2", seen)
    expect(face.attributes).toMatchObject({ "mcp.method.name": "resources/read", "mcp.session.id": expect.any(String), "mcp.protocol.version": expect.any(String) })

    const restTrace = "c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3"
    const rest = await server.request("POST", "/for_store/read_resource", {
      body: JSON.stringify({ uri: "mem://meta" }),
      headers: { "content-type": "application/json", traceparent: `00-${restTrace}-d4d4d4d4d4d4d4d4-01` }
    })
    expect(rest.status).toBe(200)
    const restSeen = JSON.parse((rest.body.contents as Array<{ text: string }>)[0]!.text) as Seen
    methodTree(await spansOf(receiver, restTrace, 2), "POST /for_store/read_resource", "resources/read", "d4d4d4d4d4d4d4d4", restSeen)
  })

  it("a 2026-07-28 client following a task: tasks/get's server span, and the relayed request's client span under it, its context sent upstream", async () => {
    const { receiver, server } = await setup()
    const era = await startEraHttpFixture()
    cleanups.push(() => era.stop())
    await addService(server, "/for_store", { name: "mod", url: era.url })
    const envelope = {
      "io.modelcontextprotocol/protocolVersion": "2026-07-28",
      "io.modelcontextprotocol/clientInfo": { name: "raw-test", version: "1.0.0" },
      "io.modelcontextprotocol/clientCapabilities": { extensions: { "io.modelcontextprotocol/tasks": {} } }
    }
    const modern = async (method: string, params: Record<string, unknown>, name: string) => {
      const res = await fetch(`${server.url}/mcp`, {
        method: "POST",
        headers: { "content-type": "application/json", accept: "application/json, text/event-stream", "mcp-protocol-version": "2026-07-28", "mcp-method": method, "mcp-name": name },
        body: JSON.stringify({ jsonrpc: "2.0", id: 4, method, params: { ...params, _meta: { ...envelope, ...(params["_meta"] as object | undefined) } } })
      })
      return (await res.json()) as { result?: Record<string, unknown> }
    }
    const started = await modern("tools/call", { name: "mod__job", arguments: { steps: 2, step_ms: 20, poll_ms: 10 } }, "mod__job")
    const taskId = String(started.result?.["taskId"])
    expect(taskId).toMatch(/^t1\./)
    const trace = "e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5"
    const got = await modern("tasks/get", { taskId, _meta: { traceparent: `00-${trace}-f6f6f6f6f6f6f6f6-01` } }, taskId)
    expect(got.result?.["taskId"]).toBe(taskId)
    const spans = await spansOf(receiver, trace, 2)
    const face = only(spans, "tasks/get", 2)
    expect(face).toMatchObject({ kind: 2, parentSpanId: "f6f6f6f6f6f6f6f6" })
    expect(face.attributes).toMatchObject({ "mcp.method.name": "tasks/get", "jsonrpc.request.id": "4", "mcp.protocol.version": "2026-07-28" })
    const relayed = spans.find((s) => s.kind === 3)!
    expect(relayed).toMatchObject({ name: "tasks/get", parentSpanId: face.spanId })
    expect(relayed.attributes).toMatchObject({ "mcp.method.name": "tasks/get", "mcp_store.service.name": "mod", "network.transport": "tcp" })
    const upstream = era.headers().filter((h) => h.method === "tasks/get").at(-1)
    expect(upstream?.traceparent).toBe(`00-${trace}-${relayed.spanId}-01`)
  })

  it("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is the traces URL as given (nothing appended), over OTEL_EXPORTER_OTLP_ENDPOINT; a call without trace context starts a trace whose first span is the request's, of the service mcp-store", async () => {
    const { receiver, fixture } = await setup()
    const nobody = `http://127.0.0.1:${await closedPort()}`
    // The base URL names a port nobody listens on: only the traces URL, taken whole, reaches the receiver.
    const server = await store("traces-env", { env: { OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: `${receiver.url}/v1/traces`, OTEL_EXPORTER_OTLP_ENDPOINT: nobody } })
    await addService(server, "/for_store", { name: "fx", url: fixture.url })
    const reply = await server.post("/for_store/call_tool", { tool_name: "fx__meta" })
    expect(reply.status).toBe(200)
    const spans = await spansOf(receiver, reply.body.trace_id as string, 2)
    const request = only(spans, "POST /for_store/call_tool")
    expect(request.parentSpanId).toBeUndefined()
    // No OTEL_SERVICE_NAME here: the store's own name.
    expect(request.resource["service.name"]).toBe("mcp-store")
    expect(only(spans, "tools/call meta")).toMatchObject({ spanId: reply.body.span_id, parentSpanId: request.spanId })
  })

  it("OTEL_EXPORTER_OTLP_ENDPOINT alone turns tracing on (its /v1/traces); a collector that never answers: every call still succeeds, and the store stops at SIGTERM with its exit code 0, held no longer than the exporter's time-out from OTEL_EXPORTER_OTLP_TIMEOUT", async () => {
    const { fixture } = await setup()
    const silent = await startSilentCollector()
    cleanups.push(() => silent.stop())
    // Exports cut at 4 s instead of the SDK's default 10 s: still longer than the store's own 3 s wait
    // for the last export at its stop, so that wait is what ends first, and an export is still
    // waiting on the collector when the store is stopped. No --otlp-endpoint: the base URL from the
    // environment alone.
    const server = await store("silent", { env: { OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${silent.port}`, OTEL_EXPORTER_OTLP_TIMEOUT: String(EXPORT_TIMEOUT_MS) } })
    await addService(server, "/for_store", { name: "fx", url: fixture.url })
    for (let i = 0; i < 30; i++) {
      const reply = await server.post("/for_store/call_tool", { tool_name: "fx__meta" })
      expect(reply.status).toBe(200)
    }
    // The exporter did reach the collector (it is the one not answering), at the base URL's /v1/traces.
    expect(await eventually(() => silent.requestLines().length > 0, 15_000)).toBe(true)
    expect(silent.requestLines()[0]).toBe("POST /v1/traces HTTP/1.1")
    const stopped = performance.now()
    server.child.kill("SIGTERM")
    const exit = await within(server.exited, 30_000, "the store's stop with a collector that never answers")
    expect(exit.code).toBe(0)
    // The export waiting on the collector held the process until its time-out, the one the
    // environment set: sooner than the SDK's default 10 s.
    expect(exit.at - stopped).toBeLessThan(DEFAULT_EXPORT_TIMEOUT_MS)
  })
})
