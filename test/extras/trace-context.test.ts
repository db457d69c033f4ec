// W3C trace context through the store, against a real upstream (the HTTP fixture's `meta` tool
// answers the `_meta` it was sent): a REST caller's `traceparent`, `tracestate` and `baggage`
// headers (on the direct call route and on the HttpApi router), an MCP client's `_meta`, and a call
// forwarded between two replicas all reach the upstream in the call's `_meta`, continued by the
// store's own span; the answer and the record carry the trace id and that span. A caller without
// trace context, or with one that is not valid, gets a trace of the store's.
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import { describe, expect, it } from "vitest"
import { addService, hasRedisServer, useReplicaCluster, useTestServers, waitStatus, within, type TestServer } from "../support/index.js"

const TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
const PARENT = "00f067aa0ba902b7"
const TRACEPARENT = `00-${TRACE}-${PARENT}-01`

/** The `_meta` the upstream received, from the `meta` tool's answer. */
const upstreamMeta = (body: { result: unknown }): Record<string, string> => JSON.parse(body.result as string) as Record<string, string>

/** A store with the fixture (with its `meta` tool) as `fx`, healthy. */
const withMetaFixture = async (servers: ReturnType<typeof useTestServers>, fixtureUrl: string): Promise<TestServer> => {
  const server = await servers.start()
  await addService(server, "/for_store", { name: "fx", url: fixtureUrl })
  return server
}

describe("trace context", () => {
  const servers = useTestServers({ httpFixture: { metaTool: true } })

  it("a REST caller's traceparent, tracestate and baggage reach the upstream under the store's span, and the answer and record carry them", async () => {
    const server = await withMetaFixture(servers, servers.fixture.url)
    const headers = { "content-type": "application/json", traceparent: TRACEPARENT, tracestate: "vendor=abc,other=1", baggage: "user=alice" }
    // The direct call route, and the HttpApi router (a query string takes the call there).
    for (const path of ["/for_store/call_tool", "/for_store/call_tool?via=router", "/for_store/use_tool"]) {
      const reply = await server.request("POST", path, { body: JSON.stringify({ tool_name: "fx__meta" }), headers })
      expect(reply.status, path).toBe(200)
      expect(reply.body.trace_id).toBe(TRACE)
      expect(reply.body.span_id).toMatch(/^[0-9a-f]{16}$/)
      expect(reply.body.span_id).not.toBe(PARENT)
      expect(upstreamMeta(reply.body)).toEqual({ traceparent: `00-${TRACE}-${reply.body.span_id}-01`, tracestate: "vendor=abc,other=1", baggage: "user=alice" })
      const records = await server.get(`/for_store/tool_records?limit=1`)
      expect(records.body.executions[0]).toMatchObject({ tool_name: "meta", trace_id: TRACE, span_id: reply.body.span_id })
    }
  })

  it("a caller without trace context, or with one that is not valid, gets a sampled trace of the store's; its tracestate is dropped with it", async () => {
    const server = await withMetaFixture(servers, servers.fixture.url)
    const invalid = [
      undefined,
      `00-${"0".repeat(32)}-${PARENT}-01`, // all-zero trace id
      `00-${TRACE}-${"0".repeat(16)}-01`, // all-zero parent id
      `ff-${TRACE}-${PARENT}-01`, // version ff
      `00-${TRACE}-${PARENT}-01-extra`, // version 00 with a fifth field
      `00-${TRACE.toUpperCase().slice(0, 31)}-${PARENT}-01`, // too short
      "not a traceparent"
    ]
    const seen = new Set<string>()
    for (const traceparent of invalid) {
      const headers: Record<string, string> = { "content-type": "application/json", tracestate: "vendor=abc" }
      if (traceparent !== undefined) headers["traceparent"] = traceparent
      const reply = await server.request("POST", "/for_store/call_tool", { body: JSON.stringify({ tool_name: "fx__meta" }), headers })
      expect(reply.status, String(traceparent)).toBe(200)
      expect(reply.body.trace_id).toMatch(/^[0-9a-f]{32}$/)
      expect(reply.body.trace_id).not.toBe(TRACE)
      expect(upstreamMeta(reply.body), String(traceparent)).toEqual({ traceparent: `00-${reply.body.trace_id}-${reply.body.span_id}-01` })
      seen.add(reply.body.trace_id)
    }
    // Each call starts a trace of its own.
    expect(seen.size).toBe(invalid.length)
  })

  it("a later version's traceparent is read by its first four fields, and unsampled flags are kept", async () => {
    const server = await withMetaFixture(servers, servers.fixture.url)
    const reply = await server.request("POST", "/for_store/call_tool", {
      body: JSON.stringify({ tool_name: "fx__meta" }),
      headers: { "content-type": "application/json", traceparent: `01-${TRACE}-${PARENT}-00-future` }
    })
    expect(reply.status).toBe(200)
    expect(upstreamMeta(reply.body)).toEqual({ traceparent: `00-${TRACE}-${reply.body.span_id}-00` })
  })

  it("an MCP client's _meta trace context reaches the upstream, and the record carries its trace id", async () => {
    const server = await withMetaFixture(servers, servers.fixture.url)
    const client = new Client({ name: "trace-test", version: "1.0.0" })
    servers.defer(() => client.close())
    await within(client.connect(new StreamableHTTPClientTransport(new URL(`${server.url}/mcp`))), 10_000, "connect /mcp")
    const result = await client.callTool({ name: "fx__meta", arguments: {}, _meta: { traceparent: TRACEPARENT, baggage: "user=bob" } })
    const meta = JSON.parse((result.content as Array<{ text: string }>)[0]!.text) as Record<string, string>
    const [version, trace, span, flags] = meta["traceparent"]!.split("-")
    expect([version, trace, flags]).toEqual(["00", TRACE, "01"])
    expect(span).not.toBe(PARENT)
    expect(meta["baggage"]).toBe("user=bob")
    const records = await server.get(`/for_store/tool_records?limit=1`)
    expect(records.body.executions[0]).toMatchObject({ tool_name: "meta", trace_id: TRACE, span_id: span })
  })
})

describe.skipIf(!hasRedisServer)("trace context between replicas", () => {
  const cluster = useReplicaCluster({ upstream: { metaTool: true } })

  it("a call forwarded to the replica that runs the service carries the calling replica's span to the upstream", async () => {
    const a = await cluster.replica("traces", { mcpServers: { fx: { url: cluster.upstream.url } } })
    const b = await cluster.replica("traces")
    await waitStatus(a, "/for_store", "fx", "healthy", 15)
    await waitStatus(b, "/for_store", "fx", "healthy", 15)
    // One of the two runs the service: the other forwards its call.
    for (const replica of [a, b]) {
      const reply = await replica.request("POST", "/for_store/call_tool", {
        body: JSON.stringify({ tool_name: "fx__meta" }),
        headers: { "content-type": "application/json", traceparent: TRACEPARENT, tracestate: "vendor=abc" }
      })
      expect(reply.status).toBe(200)
      expect(reply.body.trace_id).toBe(TRACE)
      expect(upstreamMeta(reply.body)).toEqual({ traceparent: `00-${TRACE}-${reply.body.span_id}-01`, tracestate: "vendor=abc" })
    }
  })
})
