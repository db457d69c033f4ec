// W3C trace context through the store, against a real upstream (the HTTP fixture's `meta` tool
// answers the `_meta` it was sent): a REST caller's `traceparent`, `tracestate` and `baggage`
// headers (on the direct call route and on the HttpApi router), an MCP client's `_meta`, and a call
// forwarded between two replicas all reach the upstream in the call's `_meta`, continued by the
// store's own span; the answer and the record carry the trace id and that span. A caller without
// trace context, or with one that is not valid, gets a trace of the store's.
//
// The same two replicas (on a real Redis) also carry calls held for their callers' input (the
// fixture's `ask` tool elicits; test/extras/input-required.test.ts has them on one store): a call
// forwarded to the replica that runs the service is answered input_required through the replica
// called (a 2025 client on a session is asked over its session); a retry (REST, or a 2026-07-28 MCP client's) that reaches the other replica is carried to
// the one that holds the call and answered as there (its next round, its result, its failure),
// each call recorded once; a retry whose holder left is refused at once, saying the call is lost.
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import { Client as ModernClient, StreamableHTTPClientTransport as ModernTransport } from "@modelcontextprotocol/client"
import { ElicitRequestSchema } from "@modelcontextprotocol/sdk/types.js"
import { describe, expect, it } from "vitest"
import { addService, eventually, hasRedisServer, useReplicaCluster, useTestServers, waitStatus, within, type TestServer } from "../support/index.js"

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

describe.skipIf(!hasRedisServer)("calls between replicas", () => {
  const cluster = useReplicaCluster({ upstream: { metaTool: true, elicitTool: true } })

  /** The file's two replicas, `fx` healthy on both, started once: the one that runs it and the other. */
  let started: Promise<{ readonly owner: TestServer; readonly mirror: TestServer }> | undefined
  const replicas = () =>
    (started ??= (async () => {
      const a = await cluster.replica("calls", { mcpServers: { fx: { url: cluster.upstream.url } } })
      const b = await cluster.replica("calls")
      await waitStatus(a, "/for_store", "fx", "healthy", 15)
      await waitStatus(b, "/for_store", "fx", "healthy", 15)
      return a.running.cluster?.owns("store/fx") === true ? { owner: a, mirror: b } : { owner: b, mirror: a }
    })())

  /** The outcomes recorded for `ask` (every replica reads the cluster's records). */
  const askOutcomes = async (server: TestServer): Promise<string[]> =>
    (await server.get("/for_store/tool_records?tool_name=ask")).body.executions.map((r: { outcome: string }) => r.outcome)
  const accept = (name: string) => ({ action: "accept", content: { name } })

  it("a call forwarded to the replica that runs the service carries the calling replica's span to the upstream", async () => {
    const { owner, mirror } = await replicas()
    // One of the two runs the service: the other forwards its call.
    for (const replica of [owner, mirror]) {
      const reply = await replica.request("POST", "/for_store/call_tool", {
        body: JSON.stringify({ tool_name: "fx__meta" }),
        headers: { "content-type": "application/json", traceparent: TRACEPARENT, tracestate: "vendor=abc" }
      })
      expect(reply.status).toBe(200)
      expect(reply.body.trace_id).toBe(TRACE)
      expect(upstreamMeta(reply.body)).toEqual({ traceparent: `00-${TRACE}-${reply.body.span_id}-01`, tracestate: "vendor=abc" })
    }
  })

  it("a held call answers input_required through the replica called, and each retry, on either replica, is answered by the one that holds it; each call recorded once", async () => {
    const { owner, mirror } = await replicas()
    const before = (await askOutcomes(owner)).length
    // Started on each replica (held there, its upstream request forwarded back from the owner when
    // started on the other), every retry sent to the replica that does not hold it.
    for (const [holder, other] of [
      [mirror, owner],
      [owner, mirror]
    ] as const) {
      let reply = await holder.post("/for_store/call_tool", { tool_name: "fx__ask", args: { rounds: 2 }, accept_input_required: true })
      expect(reply.status).toBe(200)
      expect(reply.body).toMatchObject({ result_type: "input_required", input_requests: { input_1: { method: "elicitation/create", params: { message: "Your name (round 1)?" } } } })
      const state = reply.body.request_state as string
      expect(state).toMatch(/^h2\.[\w-]+\.[\w-]{24}\.[\w-]{22}$/)
      // A state whose seal does not match, and retries the holder refuses, are 400s that change nothing.
      const forged = `${state.slice(0, -2)}${state.endsWith("AA") ? "BB" : "AA"}`
      for (const body of [
        { tool_name: "fx__ask", request_state: forged, input_responses: { input_1: accept("x") } },
        { tool_name: "fx__echo", request_state: state, input_responses: { input_1: accept("x") } },
        { tool_name: "fx__ask", request_state: state, input_responses: { input_9: accept("x") } }
      ]) {
        const refused = await other.post("/for_store/call_tool", body)
        expect(refused.status, JSON.stringify(body)).toBe(400)
        expect(refused.body.error.code).toBe("VALIDATION_ERROR")
      }
      reply = await other.post("/for_store/call_tool", { tool_name: "fx__ask", request_state: state, input_responses: { input_1: accept("Ada") } })
      expect(reply.body).toMatchObject({ result_type: "input_required", request_state: state, input_requests: { input_2: { params: { message: "Your name (round 2)?" } } } })
      reply = await other.post("/for_store/call_tool", { tool_name: "fx__ask", request_state: state, input_responses: { input_2: accept("Grace") } })
      expect(reply.status).toBe(200)
      expect(reply.body).toMatchObject({ success: true, result_type: "complete", result: "names: Ada, Grace", tool_name: "fx__ask" })
    }
    expect(await eventually(async () => (await askOutcomes(mirror)).length === before + 2, 10_000)).toBe(true)
    expect((await askOutcomes(owner)).slice(0, 2)).toEqual(["success", "success"])
    // Without the opt-in, the forwarded call's request is declined by the replica called, in its face's words.
    const declined = await mirror.post("/for_store/call_tool", { tool_name: "fx__ask" })
    expect(declined.status).toBe(502)
    expect(declined.text).toContain("mcp-store declined elicitation/create: the tool call was made through the REST API")
    // Nothing is left held but the ended calls kept for a late retry, on their holders.
    expect(owner.running.store.held.waiting + mirror.running.store.held.waiting).toBe(0)
  })

  it("a held call's failure reaches a retry on the other replica as itself: 504 at its time-out, recorded once", async () => {
    const { owner, mirror } = await replicas()
    const before = (await askOutcomes(owner)).length
    const first = await mirror.post("/for_store/call_tool", { tool_name: "fx__ask", accept_input_required: true, timeout: 1 })
    expect(first.body.result_type).toBe("input_required")
    expect(await eventually(async () => (await askOutcomes(owner)).length === before + 1, 10_000)).toBe(true)
    expect((await askOutcomes(owner))[0]).toBe("timeout")
    const late = await owner.post("/for_store/call_tool", { tool_name: "fx__ask", request_state: first.body.request_state, input_responses: {} })
    expect(late.status).toBe(504)
    expect(late.body.error.code).toBe("TOOL_TIMEOUT")
  })

  it("a 2026-07-28 MCP client's retry that reaches the other replica is answered by the one that holds the call", async () => {
    const { owner, mirror } = await replicas()
    const before = (await askOutcomes(owner)).length
    // Each retry (a request with `requestState`) goes to the other replica, as a load balancer may send it.
    const landed: string[] = []
    const balancer: typeof fetch = (input, init) => {
      const retry = typeof init?.body === "string" && init.body.includes('"requestState"')
      const url = retry ? String(input).replace(mirror.url, owner.url) : String(input)
      landed.push(retry ? "owner" : "mirror")
      return fetch(url, init)
    }
    const client = new ModernClient({ name: "rounds-replicas", version: "1.0.0" }, { capabilities: { elicitation: { form: {} } }, versionNegotiation: { mode: { pin: "2026-07-28" } } })
    client.onerror = () => undefined
    let asked = 0
    client.setRequestHandler("elicitation/create", async () => ({ action: "accept", content: { name: `n${++asked}` } }) as never)
    await within(client.connect(new ModernTransport(new URL(`${mirror.url}/mcp`), { fetch: balancer })), 10_000, "connect /mcp")
    try {
      const result = await within(client.callTool({ name: "fx__ask", arguments: { rounds: 2 } }), 15_000, "the call in rounds across replicas")
      expect(result.content).toEqual([{ type: "text", text: "names: n1, n2" }])
    } finally {
      await client.close()
    }
    expect(landed.filter((l) => l === "owner")).toHaveLength(2)
    expect(await eventually(async () => (await askOutcomes(owner)).length === before + 1, 10_000)).toBe(true)
    expect((await askOutcomes(owner))[0]).toBe("success")
  })

  it("a 2025 MCP client on a session is asked, through the replica it called, by the upstream of a forwarded call", async () => {
    const { mirror } = await replicas()
    const client = new Client({ name: "rounds-session", version: "1.0.0" }, { capabilities: { elicitation: {} } })
    client.setRequestHandler(ElicitRequestSchema, async (request) => ({ action: "accept", content: { name: /round \d/.exec(String(request.params.message))?.[0] ?? "?" } }))
    await within(client.connect(new StreamableHTTPClientTransport(new URL(`${mirror.url}/mcp`))), 10_000, "connect /mcp")
    try {
      const result = await within(client.callTool({ name: "fx__ask", arguments: { rounds: 2 } }), 15_000, "the forwarded call")
      expect(result.content).toEqual([{ type: "text", text: "names: round 1, round 2" }])
    } finally {
      await client.close()
    }
  })

  it("a retry whose holder left the cluster is refused at once, saying the call is lost", async () => {
    const { owner, mirror } = await replicas()
    const first = await mirror.post("/for_store/call_tool", { tool_name: "fx__ask", accept_input_required: true })
    expect(first.body.result_type).toBe("input_required")
    await mirror.close()
    const lost = await within(
      owner.post("/for_store/call_tool", { tool_name: "fx__ask", request_state: first.body.request_state, input_responses: { input_1: accept("Ada") } }),
      5000,
      "the retry of a call whose holder left"
    )
    expect(lost.status).toBe(400)
    expect(lost.body.error.code).toBe("VALIDATION_ERROR")
    expect(lost.text).toContain("held by another replica")
  })
})
