// Input in rounds over REST, against a real 2025-era server that asks mid-call (the HTTP fixture's
// `ask` tool sends elicitation/create): a caller that opts in with `accept_input_required` is
// answered `input_required` with the request and a `request_state`, and the retry with
// `input_responses` answers the server's request, once per round, until the call's result. Without
// the opt-in the request is declined as before. A retry that does not fit its call (unknown state,
// another scope or tool, keys that are not the ones asked) is a 400 that changes nothing; a call
// nobody answers ends at its time-out and is recorded once; the store's cap on held calls declines
// the request beyond it. The same held calls answer a 2026-07-28 MCP client that declared the
// capability (the SDK v2 client answers and retries by itself). The other way, a 2026-07-28 server's
// input_required reaches a 2025 client as requests over its session, and a 2026-07-28 client as the
// store's own input_required, each answer retried upstream with the server's state. Resource reads
// and prompts of both upstream eras: a missing resource as each face says not found (REST 404, a
// 2025 session -32002, a 2026-07-28 client -32602 with the URI), and their upstreams' requests for
// input bridged as a call's (REST declines them), held under the same cap.
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client"
import { Client as ClientV1 } from "@modelcontextprotocol/sdk/client/index.js"
import { StreamableHTTPClientTransport as TransportV1 } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import { ElicitRequestSchema } from "@modelcontextprotocol/sdk/types.js"
import { join } from "node:path"
import { setTimeout as delay } from "node:timers/promises"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { startEraHttpFixture, type EraHttpFixture } from "../fixtures/era-http.js"
import { eraStdio, stdioFixture } from "../fixtures/paths.js"
import { addService, authedApi, createKey, eventually, freshDir, localService, startTestServer, useTestServers, within, type TestServer } from "../support/index.js"

describe("input_required over REST", () => {
  const servers = useTestServers({ httpFixture: { elicitTool: true } })

  const store = async (options: Record<string, unknown> = {}): Promise<TestServer> => {
    const server = await servers.start({ options })
    await addService(server, "/for_store", { name: "fx", url: servers.fixture.url })
    return server
  }
  const accept = (name: string) => ({ action: "accept", content: { name } })

  it("answers input_required with the server's request, and the retry with its answer gets the call's result, recorded once", async () => {
    const server = await store()
    const first = await server.post("/for_store/call_tool", { tool_name: "fx__ask", accept_input_required: true })
    expect(first.status).toBe(200)
    expect(first.body).toMatchObject({ success: true, result_type: "input_required", tool_name: "fx__ask" })
    expect(first.body.input_requests).toEqual({
      input_1: {
        method: "elicitation/create",
        params: { mode: "form", message: "Your name (round 1)?", requestedSchema: { type: "object", properties: { name: { type: "string" } }, required: ["name"] } }
      }
    })
    expect(first.body.request_state).toMatch(/^h1\.[\w-]{24}$/)
    const done = await server.post("/for_store/call_tool", { tool_name: "fx__ask", request_state: first.body.request_state, input_responses: { input_1: accept("Ada") } })
    expect(done.status).toBe(200)
    expect(done.body).toMatchObject({ success: true, result_type: "complete", result: "names: Ada", tool_name: "fx__ask" })
    const records = await server.get("/for_store/tool_records?tool_name=ask")
    expect(records.body.executions.map((r: { outcome: string }) => r.outcome)).toEqual(["success"])
    // A retry that comes again (its answer was lost) gets the same end, while the ended call is kept.
    const again = await server.post("/for_store/call_tool", { tool_name: "fx__ask", request_state: first.body.request_state, input_responses: {} })
    expect(again.body).toMatchObject({ result_type: "complete", result: "names: Ada" })
    // So does the same retry sent again, answers and all: the ended call takes no answer and refuses none.
    const resent = await server.post("/for_store/call_tool", { tool_name: "fx__ask", request_state: first.body.request_state, input_responses: { input_1: accept("Ada") } })
    expect(resent.body).toMatchObject({ result_type: "complete", result: "names: Ada" })
    expect((await server.get("/for_store/tool_records?tool_name=ask")).body.executions).toHaveLength(1)
  })

  it("takes as many rounds as the server asks, and a declined request is the server's to handle", async () => {
    const server = await store()
    let reply = await server.post("/for_store/call_tool", { tool_name: "fx__ask", args: { rounds: 3 }, accept_input_required: true })
    const names = ["Ada", "Grace", "Edsger"]
    for (const [i, name] of names.entries()) {
      expect(reply.body.result_type, `round ${i + 1}`).toBe("input_required")
      const [key] = Object.keys(reply.body.input_requests)
      expect(reply.body.input_requests[key!].params.message).toBe(`Your name (round ${i + 1})?`)
      reply = await server.post("/for_store/call_tool", { tool_name: "fx__ask", request_state: reply.body.request_state, input_responses: { [key!]: accept(name) } })
    }
    expect(reply.body).toMatchObject({ result_type: "complete", result: "names: Ada, Grace, Edsger" })

    const asked = await server.post("/for_store/call_tool", { tool_name: "fx__ask", accept_input_required: true })
    const declined = await server.post("/for_store/call_tool", { tool_name: "fx__ask", request_state: asked.body.request_state, input_responses: { input_1: { action: "decline" } } })
    expect(declined.body).toMatchObject({ result_type: "complete", result: "round 1: decline" })
  })

  it("without the opt-in, the server's request is declined as before, and every answer says result_type complete", async () => {
    const server = await store()
    const declined = await server.post("/for_store/call_tool", { tool_name: "fx__ask" })
    expect(declined.status).toBe(502)
    expect(declined.text).toContain("mcp-store declined elicitation/create")
    const plain = await server.post("/for_store/call_tool", { tool_name: "fx__echo", args: { text: "hi" } })
    expect(plain.body).toMatchObject({ success: true, result_type: "complete", result: "hi" })
    // The opt-in on a call whose server asks nothing is an ordinary call, and nothing of it is kept.
    const opted = await Promise.all(Array.from({ length: 30 }, (_, i) => server.post("/for_store/call_tool", { tool_name: "fx__echo", args: { text: `hi ${i}` }, accept_input_required: true })))
    expect(opted.map((r) => r.body.result)).toEqual(Array.from({ length: 30 }, (_, i) => `hi ${i}`))
    expect(opted.every((r) => r.body.result_type === "complete")).toBe(true)
    expect(server.running.store.held.size).toBe(0)
  })

  it("a retry that does not fit its call is a 400 that changes nothing; the right retry still works", async () => {
    const server = await store()
    await server.post("/for_agent/a1/add_service", { name: "fx", url: servers.fixture.url })
    const first = await server.post("/for_store/call_tool", { tool_name: "fx__ask", accept_input_required: true })
    const state = first.body.request_state as string
    const refusals: Array<[string, Record<string, unknown>]> = [
      ["/for_store/call_tool", { tool_name: "fx__ask", request_state: "h1.AAAAAAAAAAAAAAAAAAAAAAAA", input_responses: { input_1: accept("x") } }],
      ["/for_store/call_tool", { tool_name: "fx__echo", request_state: state, input_responses: { input_1: accept("x") } }],
      ["/for_agent/a1/call_tool", { tool_name: "fx__ask", request_state: state, input_responses: { input_1: accept("x") } }],
      ["/for_store/call_tool", { tool_name: "fx__ask", request_state: state, input_responses: { input_9: accept("x") } }],
      ["/for_store/call_tool", { tool_name: "fx__ask", request_state: state, input_responses: {} }],
      ["/for_store/call_tool", { tool_name: "fx__ask", request_state: state, input_responses: { input_1: "yes" } }],
      ["/for_store/call_tool", { tool_name: "fx__ask", request_state: state }],
      ["/for_store/call_tool", { tool_name: "fx__ask", input_responses: { input_1: accept("x") } }]
    ]
    for (const [path, body] of refusals) {
      const reply = await server.post(path, body)
      expect(reply.status, JSON.stringify(body)).toBe(400)
      expect(reply.body.error?.code ?? reply.body.code, JSON.stringify(body)).toBe("VALIDATION_ERROR")
    }
    const done = await server.post("/for_store/call_tool", { tool_name: "fx__ask", request_state: state, input_responses: { input_1: accept("Barbara") } })
    expect(done.body).toMatchObject({ result_type: "complete", result: "names: Barbara" })
  })

  it("a call nobody answers ends at its time-out, recorded once, and its state then gives that end", async () => {
    const server = await store()
    const first = await server.post("/for_store/call_tool", { tool_name: "fx__ask", accept_input_required: true, timeout: 1 })
    expect(first.body.result_type).toBe("input_required")
    const recorded = await eventually(async () => (await server.get("/for_store/tool_records?tool_name=ask")).body.executions.length === 1, 10_000)
    expect(recorded).toBe(true)
    const records = await server.get("/for_store/tool_records?tool_name=ask")
    expect(records.body.executions[0].outcome).toBe("timeout")
    const late = await server.post("/for_store/call_tool", { tool_name: "fx__ask", request_state: first.body.request_state, input_responses: {} })
    expect(late.status).toBe(504)
  })

  it("a retry whose request goes away while the call goes on cancels the call, upstream too; its state then says it was cancelled", async () => {
    const server = await store()
    const first = await server.post("/for_store/call_tool", { tool_name: "fx__ask", args: { after_ms: 30_000 }, accept_input_required: true })
    expect(first.body.result_type).toBe("input_required")
    const answered = servers.fixture.requests().filter((r) => r === "POST").length
    const cancelled = servers.fixture.requests().filter((r) => r === "POST notifications/cancelled").length
    // The retry gives its answer and waits for the call's end, which the upstream keeps for 30 s; it goes away once the upstream has the answer.
    const gone = new AbortController()
    const retry = fetch(`${server.url}/for_store/call_tool`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ tool_name: "fx__ask", request_state: first.body.request_state, input_responses: { input_1: accept("Ada") } }),
      signal: gone.signal
    })
    retry.catch(() => undefined)
    expect(await eventually(() => servers.fixture.requests().filter((r) => r === "POST").length > answered, 5000), "the upstream has the answer").toBe(true)
    gone.abort()
    expect(await eventually(() => servers.fixture.requests().filter((r) => r === "POST notifications/cancelled").length > cancelled, 5000), "cancelled upstream").toBe(true)
    expect(await eventually(async () => (await server.get("/for_store/tool_records?tool_name=ask")).body.executions[0]?.outcome === "cancelled", 5000), "recorded cancelled").toBe(true)
    const late = await server.post("/for_store/call_tool", { tool_name: "fx__ask", request_state: first.body.request_state, input_responses: { input_1: accept("Ada") } })
    expect(late.status, late.text).toBe(400)
    expect(late.body.error.code).toBe("VALIDATION_ERROR")
    expect(late.text).toContain("names a request that was cancelled")
  })

  it("beyond --max-held-calls, a server's request is declined as without the opt-in", async () => {
    const server = await store({ max_held_calls: 1 })
    const held = await server.post("/for_store/call_tool", { tool_name: "fx__ask", accept_input_required: true })
    expect(held.body.result_type).toBe("input_required")
    const beyond = await server.post("/for_store/call_tool", { tool_name: "fx__ask", accept_input_required: true })
    expect(beyond.status).toBe(502)
    expect(beyond.text).toContain("too many calls are waiting")
    const done = await server.post("/for_store/call_tool", { tool_name: "fx__ask", request_state: held.body.request_state, input_responses: { input_1: accept("Alan") } })
    expect(done.body.result).toBe("names: Alan")
    // The call whose caller was told input_required is kept for its retry (the cap bounds how many).
    expect(server.running.store.held.size).toBe(1)
  })

  it("a request the server asks before the retry comes is the next round, and the retry answering what it was shown is taken", async () => {
    const server = await store()
    // The nickname is asked 50 ms after the name, while the name waits for its answer.
    const first = await server.post("/for_store/call_tool", { tool_name: "fx__ask", args: { second_after_ms: 50 }, accept_input_required: true })
    expect(Object.keys(first.body.input_requests)).toEqual(["input_1"])
    await delay(500)
    const next = await server.post("/for_store/call_tool", { tool_name: "fx__ask", request_state: first.body.request_state, input_responses: { input_1: accept("Ada") } })
    expect(next.status, next.text).toBe(200)
    expect(next.body).toMatchObject({ result_type: "input_required", request_state: first.body.request_state })
    expect(next.body.input_requests).toEqual({ input_2: { method: "elicitation/create", params: expect.objectContaining({ message: "Your nickname?" }) } })
    // A request not shown yet takes no answer.
    const early = await server.post("/for_store/call_tool", { tool_name: "fx__ask", args: { second_after_ms: 50 }, accept_input_required: true })
    await delay(500)
    const unshown = await server.post("/for_store/call_tool", { tool_name: "fx__ask", request_state: early.body.request_state, input_responses: { input_1: accept("x"), input_2: accept("y") } })
    expect(unshown.status).toBe(400)
    const done = await server.post("/for_store/call_tool", { tool_name: "fx__ask", request_state: first.body.request_state, input_responses: { input_2: accept("Addie") } })
    expect(done.body).toMatchObject({ result_type: "complete", result: "names: Ada, Addie" })
  })

  it("a request the server withdrew (notifications/cancelled) after the caller was shown it: the retry's answer to it is ignored, not refused", async () => {
    const server = await store()
    const first = await server.post("/for_store/call_tool", { tool_name: "fx__ask", args: { withdraw_after_ms: 200 }, accept_input_required: true })
    expect(first.body.input_requests.input_1.params.message).toBe("Your name (round 1)?")
    // The server withdraws it 200 ms after it was sent, and asks again.
    await delay(700)
    const next = await server.post("/for_store/call_tool", { tool_name: "fx__ask", request_state: first.body.request_state, input_responses: { input_1: accept("Ada") } })
    expect(next.status, next.text).toBe(200)
    expect(next.body.input_requests).toEqual({ input_2: { method: "elicitation/create", params: expect.objectContaining({ message: "Your name (round 1, again)?" }) } })
    const done = await server.post("/for_store/call_tool", { tool_name: "fx__ask", request_state: first.body.request_state, input_responses: { input_2: accept("Grace") } })
    expect(done.body).toMatchObject({ result_type: "complete", result: "names: Grace" })
  })

  it("two retries of one state both follow the call: each gets its end, and one going away does not cancel the call the other follows", async () => {
    const server = await store()
    const post = (body: Record<string, unknown>, signal?: AbortSignal) =>
      fetch(`${server.url}/for_store/call_tool`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ tool_name: "fx__ask", ...body }), ...(signal ? { signal } : {}) })
    for (const leave of [false, true]) {
      const first = await server.post("/for_store/call_tool", { tool_name: "fx__ask", args: { after_ms: 1500 }, accept_input_required: true })
      const answered = servers.fixture.requests().filter((r) => r === "POST").length
      const gone = new AbortController()
      const one = post({ request_state: first.body.request_state, input_responses: { input_1: accept("Ada") } }, gone.signal)
      one.catch(() => undefined)
      expect(await eventually(() => servers.fixture.requests().filter((r) => r === "POST").length > answered, 5000), "the upstream has the answer").toBe(true)
      // The same retry sent again (its answer lost on the way): the answer given is ignored.
      const two = post({ request_state: first.body.request_state, input_responses: { input_1: accept("Ada") } })
      await delay(300)
      if (leave) gone.abort()
      const ends = await within(Promise.all([leave ? undefined : one.then((r) => r.json()), two.then((r) => r.json())]), 10_000, "both retries answered")
      for (const end of ends.filter((e) => e !== undefined)) expect(end, `leave: ${leave}`).toMatchObject({ result_type: "complete", result: "names: Ada" })
    }
    const records = await server.get("/for_store/tool_records?tool_name=ask")
    expect(records.body.executions.map((r: { outcome: string }) => r.outcome)).toEqual(["success", "success"])
  })

  it("one key may hold a quarter of --max-held-calls waiting, and keeps as many ended calls: the others' are neither declined nor pushed out", async () => {
    const dir = freshDir()
    const keysFile = join(dir, "mcp-store.keys.json")
    const [k1, k2] = [await createKey(keysFile, "--role", "admin", "--name", "one"), await createKey(keysFile, "--role", "admin", "--name", "two")]
    const server = await servers.start({ dir, options: { max_held_calls: 4 } })
    const [one, two] = [authedApi(server.url, k1), authedApi(server.url, k2)]
    expect((await addService(one, "/for_store", { name: "fx", url: servers.fixture.url })).status).toBe(200)
    const ask = (caller: typeof one) => caller.post("/for_store/call_tool", { tool_name: "fx__ask", accept_input_required: true })
    const answer = (caller: typeof one, state: string, name: string) => caller.post("/for_store/call_tool", { tool_name: "fx__ask", request_state: state, input_responses: { input_1: accept(name) } })

    const held = await ask(one)
    expect(held.body.result_type).toBe("input_required")
    const beyond = await ask(one)
    expect(beyond.status).toBe(502)
    expect(beyond.text).toContain("this caller already has 1 calls waiting for its input")
    const others = await ask(two)
    expect(others.body.result_type).toBe("input_required")
    expect((await answer(two, others.body.request_state, "Two")).body.result).toBe("names: Two")
    expect((await answer(one, held.body.request_state, "One")).body.result).toBe("names: One")
    // Key one ends more held calls than the store keeps: its own oldest are forgotten, not key two's.
    for (let i = 0; i < 4; i++) {
      const more = await ask(one)
      expect((await answer(one, more.body.request_state, `One ${i}`)).body.result).toBe(`names: One ${i}`)
    }
    const kept = await answer(two, others.body.request_state, "Two")
    expect(kept.status, kept.text).toBe(200)
    expect(kept.body).toMatchObject({ result_type: "complete", result: "names: Two" })
    expect((await answer(one, held.body.request_state, "One")).status).toBe(400)
  })

  it("without keys every caller shares the whole of --max-held-calls", async () => {
    const server = await servers.start({ options: { max_held_calls: 4 } })
    expect((await addService(server, "/for_store", { name: "fx", url: servers.fixture.url })).status).toBe(200)
    const ask = () => server.post("/for_store/call_tool", { tool_name: "fx__ask", accept_input_required: true })
    const held = [await ask(), await ask(), await ask()]
    for (const reply of held) expect(reply.body.result_type, reply.text).toBe("input_required")
    for (const [i, reply] of held.entries()) {
      const done = await server.post("/for_store/call_tool", { tool_name: "fx__ask", request_state: reply.body.request_state, input_responses: { input_1: accept(`N${i}`) } })
      expect(done.body.result).toBe(`names: N${i}`)
    }
  })
})

describe("input_required over MCP 2026-07-28 (a 2025-era server asks mid-call)", () => {
  const servers = useTestServers({ httpFixture: { elicitTool: true } })

  /** The SDK v2 client pinned to 2026-07-28 on the store's /mcp, answering elicitations with `answer` when given. */
  const modernClient = async (server: TestServer, answer?: (message: string) => Record<string, unknown>) => {
    const client = new Client({ name: "rounds-test", version: "1.0.0" }, { capabilities: answer === undefined ? {} : { elicitation: { form: {} } }, versionNegotiation: { mode: { pin: "2026-07-28" } } })
    client.onerror = () => undefined
    if (answer !== undefined) client.setRequestHandler("elicitation/create", async (request) => answer(String((request.params as { message?: unknown }).message)) as never)
    servers.defer(() => client.close())
    await within(client.connect(new StreamableHTTPClientTransport(new URL(`${server.url}/mcp`))), 10_000, "connect /mcp")
    return client
  }

  it("a client that declares elicitation answers the server's requests in rounds (input_required, retried by the SDK), and the call is recorded once", async () => {
    const server = await servers.start()
    await addService(server, "/for_store", { name: "fx", url: servers.fixture.url })
    const asked: string[] = []
    const client = await modernClient(server, (message) => {
      asked.push(message)
      return { action: "accept", content: { name: `n${asked.length}` } }
    })
    const progress: Array<number> = []
    const result = await within(client.callTool({ name: "fx__ask", arguments: { rounds: 2 } }, { onprogress: (p) => void progress.push(p.progress) }), 15_000, "the call in rounds")
    expect(result.content).toEqual([{ type: "text", text: "names: n1, n2" }])
    expect(asked).toEqual(["Your name (round 1)?", "Your name (round 2)?"])
    // The progress of each round reaches the request of that round (each retry is a request of its
    // own). This client reports each one twice (the store hands each once to the round's request).
    expect([...new Set(progress)]).toEqual([1, 2])
    const records = await server.get("/for_store/tool_records?tool_name=ask")
    expect(records.body.executions.map((r: { outcome: string }) => r.outcome)).toEqual(["success"])
  })

  it("a client without the capability has the server's request declined, saying why", async () => {
    const server = await servers.start()
    await addService(server, "/for_store", { name: "fx", url: servers.fixture.url })
    const client = await modernClient(server)
    const result = await within(client.callTool({ name: "fx__ask", arguments: {} }), 15_000, "the declined call")
    expect(result.isError).toBe(true)
    expect(JSON.stringify(result.content)).toContain("mcp-store declined elicitation/create")
  })
})

describe("a 2026-07-28 server that answers input_required, through the store", () => {
  const servers = useTestServers()
  let era: EraHttpFixture
  beforeAll(async () => {
    era = await startEraHttpFixture()
  })
  afterAll(() => era?.stop())

  const store = async () => {
    const server = await servers.start()
    await addService(server, "/for_store", { name: "modern", url: era.url })
    return server
  }

  it("a 2025 client on a session is sent the server's requests as its own, and the store retries upstream with its answers", async () => {
    const server = await store()
    const client = new ClientV1({ name: "rounds-2025", version: "1.0.0" }, { capabilities: { elicitation: {} } })
    const asked: string[] = []
    client.setRequestHandler(ElicitRequestSchema, async (request) => {
      asked.push(String(request.params.message))
      return { action: "accept", content: { ok: true } }
    })
    servers.defer(() => client.close())
    await within(client.connect(new TransportV1(new URL(`${server.url}/mcp`))), 10_000, "connect /mcp")
    const result = await within(client.callTool({ name: "modern__confirm", arguments: { rounds: 2 } }), 15_000, "the bridged call")
    expect(result.content).toEqual([{ type: "text", text: "confirmed 2" }])
    expect(asked).toEqual(["Proceed (round 1)?", "Proceed (round 2)?"])
  })

  it("a 2026-07-28 client gets input_required from the store (its own state), and its retry reaches the server", async () => {
    const server = await store()
    const client = new Client({ name: "rounds-2026", version: "1.0.0" }, { capabilities: { elicitation: { form: {} } }, versionNegotiation: { mode: { pin: "2026-07-28" } } })
    client.onerror = () => undefined
    client.setRequestHandler("elicitation/create", async () => ({ action: "accept", content: { ok: true } }) as never)
    servers.defer(() => client.close())
    await within(client.connect(new StreamableHTTPClientTransport(new URL(`${server.url}/mcp`))), 10_000, "connect /mcp")
    const result = await within(client.callTool({ name: "modern__confirm", arguments: {} }), 15_000, "the modern call in rounds")
    expect(result.content).toEqual([{ type: "text", text: "confirmed 1" }])
    const records = await server.get("/for_store/tool_records?tool_name=confirm")
    expect(records.body.executions.map((r: { outcome: string }) => r.outcome)).toEqual(["success"])
  })
})

describe("resources and prompts of both eras, through REST and both /mcp eras", () => {
  // The 1.x fixture (2025 era: its requests sent during the read or prompt, a missing resource
  // -32002) in agent `old` (Streamable HTTP: a request tied by its stream) and `oldlocal` (stdio:
  // tied as the only one in flight), the era fixture (2026-07-28: input_required, a missing resource
  // -32602 with its URI) in agent `new` (Streamable HTTP) and `newlocal` (stdio): each agent's one
  // service offers `mem://notes/{id}`, `mem://locked` and the prompt `greet`. The first two tests
  // share one store with the four agents (started on first use): each only reads, with clients of
  // its own ended after it, and neither leaves a held call waiting.
  const servers = useTestServers({ httpFixture: { catalog: true } })
  let era: EraHttpFixture
  let everyAgent: Promise<TestServer> | undefined
  beforeAll(async () => {
    era = await startEraHttpFixture()
  })
  afterAll(async () => {
    await (await everyAgent?.catch(() => undefined))?.cleanup()
    await era?.stop()
  })
  const agents = ["old", "oldlocal", "new", "newlocal"] as const
  const definition = (service: (typeof agents)[number]) =>
    service === "old"
      ? { name: service, url: servers.fixture.url }
      : service === "new"
        ? { name: service, url: era.url }
        : localService(service, service === "oldlocal" ? stdioFixture("--catalog") : eraStdio("reject"))

  /** A store with an agent of each service given, named as its service. */
  const store = async (services: ReadonlyArray<(typeof agents)[number]>, options: Record<string, unknown> = {}) => {
    const server = await servers.start({ options })
    await Promise.all(services.map((service) => addService(server, `/for_agent/${service}`, definition(service))))
    return server
  }
  /** The shared store with an agent of each of the four services, ended after the describe. */
  const sharedStore = (): Promise<TestServer> =>
    (everyAgent ??= (async () => {
      const server = await startTestServer()
      try {
        await Promise.all(agents.map((service) => addService(server, `/for_agent/${service}`, definition(service))))
        return server
      } catch (error) {
        await server.cleanup()
        throw error
      }
    })())
  /** An SDK 1.x client (a 2025 session) on `path`, answering elicitations with `answer` when given. */
  const sessionClient = async (url: string, answer?: (message: string) => Record<string, unknown>) => {
    const client = new ClientV1({ name: "catalog-2025", version: "1.0.0" }, { capabilities: answer === undefined ? {} : { elicitation: {} } })
    if (answer !== undefined) client.setRequestHandler(ElicitRequestSchema, async (request) => answer(String(request.params.message)) as never)
    servers.defer(() => client.close())
    await within(client.connect(new TransportV1(new URL(url))), 10_000, `connect ${url}`)
    return client
  }
  /** The SDK v2 client pinned to 2026-07-28 on `url`, answering elicitations with `answer` when given. */
  const modernClient = async (url: string, answer?: (message: string) => Record<string, unknown>) => {
    const client = new Client({ name: "catalog-2026", version: "1.0.0" }, { capabilities: answer === undefined ? {} : { elicitation: { form: {} } }, versionNegotiation: { mode: { pin: "2026-07-28" } } })
    client.onerror = () => undefined
    if (answer !== undefined) client.setRequestHandler("elicitation/create", async (request) => answer(String((request.params as { message?: unknown }).message)) as never)
    servers.defer(() => client.close())
    await within(client.connect(new StreamableHTTPClientTransport(new URL(url))), 10_000, `connect ${url}`)
    return client
  }
  const answers = (message: string) => (message === "Your name?" ? { action: "accept", content: { name: "Ada" } } : { action: "accept", content: { ok: true } })
  const failure = (p: Promise<unknown>) => p.then(() => undefined, (e: unknown) => e as { code?: number; data?: unknown; message: string })

  it("a resource the upstream does not have is RESOURCE_NOT_FOUND over REST, -32002 to a 2025 session and -32602 with its URI to a 2026-07-28 client, whichever era the upstream speaks", async () => {
    const server = await sharedStore()
    const uri = "mem://notes/missing"
    for (const service of agents) {
      const prefix = `/for_agent/${service}`
      const rest = await server.post(`${prefix}/read_resource`, { uri })
      expect(rest.status, service).toBe(404)
      expect(rest.body.error, service).toMatchObject({ code: "RESOURCE_NOT_FOUND", details: { uri } })
      const found = await server.post(`${prefix}/read_resource`, { uri: "mem://notes/7" })
      expect(found.body.contents, service).toEqual([{ uri: "mem://notes/7", mimeType: "text/plain", text: "note 7" }])

      const session = await sessionClient(`${server.url}${prefix}/mcp`)
      expect(await failure(session.readResource({ uri })), service).toMatchObject({ code: -32002, data: { uri } })
      const modern = await modernClient(`${server.url}${prefix}/mcp`)
      expect(await failure(modern.readResource({ uri })), service).toMatchObject({ code: -32602, data: { uri } })
      expect((await modern.readResource({ uri: "mem://notes/7" })).contents[0], service).toMatchObject({ text: "note 7" })
    }
  })

  it("a read or a prompt whose upstream asks for input: a 2025 session that declared elicitation gets the request, a 2026-07-28 client input_required and retries; the others are declined, saying why", async () => {
    const server = await sharedStore()
    for (const service of agents) {
      const prefix = `/for_agent/${service}`
      const url = `${server.url}${prefix}/mcp`
      const asked: string[] = []
      const session = await sessionClient(url, (message) => (asked.push(message), answers(message)))
      expect((await within(session.readResource({ uri: "mem://locked" }), 10_000, "2025 read")).contents[0], service).toMatchObject({ text: "the locked note" })
      expect((await within(session.getPrompt({ name: `${service}__greet` }), 10_000, "2025 prompt")).messages[0]?.content, service).toEqual({ type: "text", text: "Hello, Ada" })
      expect(asked, service).toEqual(["Read mem://locked?", "Your name?"])

      const modern = await modernClient(url, answers)
      expect((await within(modern.readResource({ uri: "mem://locked" }), 10_000, "modern read")).contents[0], service).toMatchObject({ text: "the locked note" })
      expect((await within(modern.getPrompt({ name: `${service}__greet` }), 10_000, "modern prompt")).messages[0]?.content, service).toEqual({ type: "text", text: "Hello, Ada" })

      const deaf = await sessionClient(url)
      expect((await failure(deaf.readResource({ uri: "mem://locked" })))?.message, service).toContain("mcp-store declined elicitation/create: the MCP client that made this read did not declare the elicitation capability")
      const deafModern = await modernClient(url)
      expect((await failure(deafModern.getPrompt({ name: `${service}__greet` })))?.message, service).toContain(
        "mcp-store declined elicitation/create: the MCP 2026-07-28 client that made this prompt request did not declare the capability"
      )
      const rest = await server.post(`${prefix}/read_resource`, { uri: "mem://locked" })
      expect(rest.status, service).toBe(502)
      expect(rest.text, service).toContain("mcp-store declined elicitation/create: the resource was read through the REST API")
      const restPrompt = await server.post(`${prefix}/get_prompt`, { name: `${service}__greet` })
      expect(restPrompt.text, service).toContain("mcp-store declined elicitation/create: the prompt was asked for through the REST API")
    }
    // The modern rounds ended; each is kept a while for a retry that comes for its end, none waits.
    expect(server.running.store.held.waiting).toBe(0)
  })

  it("held reads share the held calls' cap and rules: a retry names its own read, and past --max-held-calls the upstream's request is declined", async () => {
    const server = await store(["new"], { max_held_calls: 1 })
    const modern = (method: string, params: Record<string, unknown>, name: string) =>
      fetch(`${server.url}/for_agent/new/mcp`, {
        method: "POST",
        headers: { "content-type": "application/json", accept: "application/json, text/event-stream", "mcp-protocol-version": "2026-07-28", "mcp-method": method, "mcp-name": name },
        body: JSON.stringify({
          jsonrpc: "2.0",
          id: 1,
          method,
          params: {
            ...params,
            _meta: {
              "io.modelcontextprotocol/protocolVersion": "2026-07-28",
              "io.modelcontextprotocol/clientInfo": { name: "raw", version: "1.0.0" },
              "io.modelcontextprotocol/clientCapabilities": { elicitation: { form: {} } }
            }
          }
        })
      }).then(async (r) => {
        // One JSON body, or an SSE stream whose last data line is the answer.
        const text = await r.text()
        const data = text.split("\n").filter((l) => l.startsWith("data:"))
        return JSON.parse(data.length > 0 ? data.at(-1)!.slice(5) : text) as { result?: Record<string, unknown>; error?: { code: number; message: string } }
      })
    const first = await modern("resources/read", { uri: "mem://locked" }, "mem://locked")
    expect(first.result).toMatchObject({ resultType: "input_required", inputRequests: { input_1: { method: "elicitation/create", params: { message: "Read mem://locked?" } } } })
    const state = first.result!["requestState"] as string
    // The store's cap: one held call waits already.
    const beyond = await modern("prompts/get", { name: "new__greet" }, "new__greet")
    expect(beyond.error?.message).toContain("too many calls are waiting")
    // A state is taken back only by the read it was made for.
    const other = await modern("prompts/get", { name: "new__greet", requestState: state, inputResponses: { input_1: { action: "accept", content: { name: "x" } } } }, "new__greet")
    expect(other.error).toMatchObject({ code: -32602 })
    const done = await modern("resources/read", { uri: "mem://locked", requestState: state, inputResponses: { input_1: { action: "accept", content: { ok: true } } } }, "mem://locked")
    expect(done.result).toMatchObject({ resultType: "complete", contents: [{ text: "the locked note" }] })
  })
})
