// Approvals bound to the call (src/runtime/approvals.ts, src/http/approvals/) over real HTTP, with the
// stdio fixture as the upstream: a service's `require_approval` makes a call wait until an admin key
// approves (the call then runs, its record naming the approver) or denies it (403 APPROVAL_DENIED,
// recorded `denied`), or until the approval time-out (504 APPROVAL_TIMEOUT, recorded
// `approval_timeout`). An approval is bound to one call with its arguments: approving one call of a
// tool lets no other call of it through, and a digest of other arguments decides nothing. The caps
// per key, a caller that goes away, an asynchronous call, /events, the roles (an agent key lists its
// agent's approvals and decides none), a 2026-07-28 client (input_required with a URL elicitation of
// the approval page when it declared the URL mode, else it waits) and a 2025 session (progress while it waits).
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { join } from "node:path"
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import { runKeys } from "../../src/cli/keys-command.js"
import { runApprovals } from "../../src/cli/approvals-command.js"
import { addService, authedApi, eventually, fixtureService, freshDir, modernRequest, openSse, startTestServer, within, type Api, type Reply, type SseStream, type TestServer } from "../support/index.js"

const A = "agent-a"

const keysCli = async (file: string, ...argv: string[]) => {
  let out = ""
  let err = ""
  const code = await runKeys([...argv, "--keys-file", file], {}, { writeOut: (t) => void (out += t), writeErr: (t) => void (err += t) })
  return { code, out: out.trim(), err }
}

interface Pending {
  readonly approval_id: string
  readonly tool_name: string
  readonly arguments: Record<string, unknown>
  readonly arguments_digest: string
  readonly caller: string
  readonly call_id: string | null
  readonly approval_url: string | null
}

describe("approvals bound to the call", () => {
  let server: TestServer
  let admin: Api
  let agent: Api
  let events: SseStream
  const keys = { admin: "", agent: "" }

  /** The pending approval whose arguments are `args` (waited for: the call is on its way). */
  const pendingFor = async (args: Record<string, unknown>, client: Api = admin, path = "/for_store/approvals"): Promise<Pending> => {
    let found: Pending | undefined
    const seen = await eventually(async () => {
      const list = await client.get(path)
      found = (list.body.approvals as Pending[] | undefined)?.find((a) => JSON.stringify(a.arguments) === JSON.stringify(args))
      return found !== undefined
    }, 10_000)
    expect(seen, `an approval of ${JSON.stringify(args)} is pending`).toBe(true)
    return found!
  }

  const decide = (id: string, decision: string, extra: Record<string, unknown> = {}, client: Api = admin) => client.post(`/for_store/approvals/${id}`, { decision, ...extra })

  const recordOf = async (traceId: string, prefix = "/for_store") => {
    let record: Record<string, any> | undefined
    await eventually(async () => {
      const records = await admin.get(`${prefix}/tool_records?limit=100`)
      record = (records.body.executions as Array<Record<string, any>>).find((r) => r.trace_id === traceId)
      return record !== undefined
    }, 5_000)
    return record
  }

  beforeAll(async () => {
    const dir = freshDir()
    const keysFile = join(dir, "mcp-store.keys.json")
    for (const [name, argv] of [
      ["admin", ["--role", "admin"]],
      ["agent", ["--role", "agent", "--agent", A]]
    ] as const) {
      const r = await keysCli(keysFile, "create", "--name", name, ...argv)
      expect(r.code, r.err).toBe(0)
      keys[name] = r.out
    }
    server = await startTestServer({ dir, options: { approval_timeout_seconds: 3, max_approvals_per_key: 3 } })
    admin = authedApi(server.url, keys.admin)
    agent = authedApi(server.url, keys.agent)
    const added = await Promise.all([
      addService(admin, "/for_store", { ...fixtureService("svc"), require_approval: ["echo", "ad?"] }),
      addService(admin, `/for_agent/${A}`, { ...fixtureService("own"), require_approval: ["echo"] })
    ])
    for (const r of added) expect(r.status, r.text).toBe(200)
    events = await openSse(`${server.url}/events`, { authorization: `Bearer ${keys.admin}` })
  }, 60_000)
  afterAll(async () => {
    events?.close()
    await server?.cleanup()
  }, 15_000)

  it("a call waits for its approval; approved by an admin key it runs, and its record names the approver", async () => {
    // A tool the globs leave out runs at once.
    const free = await admin.post("/for_store/call_tool", { tool_name: "svc__fail" })
    expect(free.status, free.text).toBe(200)
    expect(free.body.is_error).toBe(true)
    expect(server.running.store.approvals.size).toBe(0)

    const call = admin.post("/for_store/call_tool", { tool_name: "svc__echo", args: { text: "granted" } })
    const pending = await pendingFor({ text: "granted" })
    expect(pending).toMatchObject({ tool_name: "svc__echo", caller: "admin key 'admin'", call_id: null })
    expect(pending.approval_url).toBe(`${server.url}/ui#approval=${pending.approval_id}`)
    expect((await admin.get(`/for_store/approvals/${pending.approval_id}`)).body.approval).toEqual(pending)
    await events.waitFor((e) => e.event === "approval" && e.json?.approval_id === pending.approval_id && e.json.status === "pending", 5_000, "pending event")

    const decided = await decide(pending.approval_id, "approve", { arguments_digest: pending.arguments_digest })
    expect(decided.status, decided.text).toBe(200)
    expect(decided.body).toMatchObject({ decision: "approved", decided_by: "admin key 'admin'" })
    const answer: Reply = await call
    expect(answer.status, answer.text).toBe(200)
    expect(answer.body.result).toBe("granted")
    await events.waitFor((e) => e.event === "approval" && e.json?.approval_id === pending.approval_id && e.json.status === "approved" && e.json.decided_by === "admin key 'admin'", 5_000, "approved event")
    const record = await recordOf(answer.body.trace_id)
    expect(record).toMatchObject({ outcome: "success", approval: { approval_id: pending.approval_id, decided_by: "admin key 'admin'" } })
    // Decided once: the same id decides nothing more.
    expect((await decide(pending.approval_id, "deny")).status).toBe(404)
  })

  it("denied, the call is 403 APPROVAL_DENIED and recorded `denied` with who denied it", async () => {
    const call = admin.post("/for_store/call_tool", { tool_name: "svc__add", args: { a: 1, b: 2 } })
    const pending = await pendingFor({ a: 1, b: 2 })
    expect((await decide(pending.approval_id, "deny")).body).toMatchObject({ decision: "denied", decided_by: "admin key 'admin'" })
    const answer: Reply = await call
    expect(answer.status, answer.text).toBe(403)
    expect(answer.body.error).toMatchObject({ code: "APPROVAL_DENIED", details: { approval_id: pending.approval_id, decided_by: "admin key 'admin'", tool_name: "svc__add" } })
    const records = await admin.get("/for_store/tool_records?outcome=denied&limit=100")
    const record = (records.body.executions as Array<Record<string, any>>).find((r) => r.approval?.approval_id === pending.approval_id)
    expect(record).toMatchObject({ outcome: "denied", tool_name: "add", result: null, approval: { decided_by: "admin key 'admin'" } })
  })

  it("undecided past --approval-timeout, the call is 504 APPROVAL_TIMEOUT and recorded `approval_timeout`", async () => {
    const started = performance.now()
    const call = admin.post("/for_store/call_tool", { tool_name: "svc__echo", args: { text: "nobody decides" } })
    const pending = await pendingFor({ text: "nobody decides" })
    const answer: Reply = await call
    expect(performance.now() - started).toBeGreaterThanOrEqual(2_900)
    expect(answer.status, answer.text).toBe(504)
    expect(answer.body.error).toMatchObject({ code: "APPROVAL_TIMEOUT", details: { approval_id: pending.approval_id, decided_by: null } })
    const records = await admin.get("/for_store/tool_records?outcome=approval_timeout&limit=100")
    expect((records.body.executions as Array<Record<string, any>>).some((r) => r.approval?.approval_id === pending.approval_id && r.approval.decided_by === null)).toBe(true)
    expect((await admin.get(`/for_store/approvals/${pending.approval_id}`)).status).toBe(404)
  })

  it("an approval is bound to its call: the same tool with other arguments is not approved, and a digest of other arguments decides nothing", async () => {
    const first = admin.post("/for_store/call_tool", { tool_name: "svc__echo", args: { text: "rm /tmp/a" } })
    const second = admin.post("/for_store/call_tool", { tool_name: "svc__echo", args: { text: "rm /" } })
    const a = await pendingFor({ text: "rm /tmp/a" })
    const b = await pendingFor({ text: "rm /" })
    expect(a.approval_id).not.toBe(b.approval_id)
    expect(a.arguments_digest).not.toBe(b.arguments_digest)
    // The approver saw a's arguments: that digest does not decide b.
    const mismatch = await decide(b.approval_id, "approve", { arguments_digest: a.arguments_digest })
    expect(mismatch.status, mismatch.text).toBe(400)
    expect(mismatch.body.error.details.fields[0].field).toBe("arguments_digest")
    expect((await decide(a.approval_id, "approve")).status).toBe(200)
    expect((await first).body.result).toBe("rm /tmp/a")
    // b still waits: approving a let nothing else through.
    expect((await admin.get(`/for_store/approvals/${b.approval_id}`)).status).toBe(200)
    expect((await decide(b.approval_id, "deny")).status).toBe(200)
    expect((await second).status).toBe(403)
  })

  it("bad decisions are 400 or 404 and change nothing; only an admin key decides; an agent key lists its own agent's approvals", async () => {
    expect((await decide("apr_unknownunknownunknown1", "approve")).status).toBe(404)
    const malformed = await decide("not-an-id", "approve")
    expect(malformed.status).toBe(400)
    expect(malformed.body.error.code).toBe("VALIDATION_ERROR")

    const call = agent.post(`/for_agent/${A}/call_tool`, { tool_name: "own__echo", args: { text: "agent call" } })
    const pending = await pendingFor({ text: "agent call" }, agent, `/for_agent/${A}/approvals`)
    expect(pending.caller).toBe(`agent '${A}' key 'agent'`)
    const bad = await decide(pending.approval_id, "maybe")
    expect(bad.status).toBe(400)
    // An agent approving its own call would defeat the purpose: the store-wide routes are closed to it.
    expect((await decide(pending.approval_id, "approve", {}, agent)).status).toBe(403)
    expect((await agent.get("/for_store/approvals")).status).toBe(403)
    expect((await agent.get(`/for_agent/other/approvals`)).status).toBe(403)
    expect((await admin.get(`/for_store/approvals/${pending.approval_id}`)).status).toBe(200)
    expect((await decide(pending.approval_id, "approve")).status).toBe(200)
    const answer: Reply = await call
    expect(answer.status, answer.text).toBe(200)
    expect(answer.body.result).toBe("agent call")
    const record = await recordOf(answer.body.trace_id, `/for_agent/${A}`)
    expect(record?.approval?.decided_by).toBe("admin key 'admin'")
  })

  it("bounded: past --max-approvals-per-key a call that needs an approval is 429; a caller that goes away takes its approval with it", async () => {
    const calls = [1, 2, 3].map((n) => admin.post("/for_store/call_tool", { tool_name: "svc__echo", args: { text: `cap ${n}` } }))
    const pending = await Promise.all([1, 2, 3].map((n) => pendingFor({ text: `cap ${n}` })))
    const beyond = await admin.post("/for_store/call_tool", { tool_name: "svc__echo", args: { text: "cap 4" } })
    expect(beyond.status, beyond.text).toBe(429)
    expect(beyond.body.error.details).toMatchObject({ limit: "max_approvals_per_key", max: 3 })
    await Promise.all(pending.map((p) => decide(p.approval_id, "deny")))
    for (const c of await Promise.all(calls)) expect(c.status).toBe(403)

    const gone = new AbortController()
    const left = fetch(`${server.url}/for_store/call_tool`, {
      method: "POST",
      headers: { authorization: `Bearer ${keys.admin}`, "content-type": "application/json" },
      body: JSON.stringify({ tool_name: "svc__echo", args: { text: "going away" } }),
      signal: gone.signal
    }).catch(() => undefined)
    const p = await pendingFor({ text: "going away" })
    gone.abort()
    await left
    expect(await eventually(() => server.running.store.approvals.get(p.approval_id) === undefined, 5_000)).toBe(true)
    await events.waitFor((e) => e.event === "approval" && e.json?.approval_id === p.approval_id && e.json.status === "cancelled", 5_000, "cancelled event")
  })

  it("an asynchronous call waits for its approval without its caller, and its status shows the end", async () => {
    const started = await admin.post("/for_store/call_tool", { tool_name: "svc__echo", args: { text: "later" }, async: true })
    expect(started.status, started.text).toBe(202)
    const pending = await pendingFor({ text: "later" })
    expect(pending.call_id).toBe(started.body.call_id)
    expect((await decide(pending.approval_id, "approve")).status).toBe(200)
    let status: Reply | undefined
    await eventually(async () => {
      status = await admin.get(`/for_store/calls/${started.body.call_id}`)
      return status.body.status !== "running"
    }, 5_000)
    expect(status?.body).toMatchObject({ status: "completed", answer: { http_status: 200, body: { result: "later" } } })
  })

  it("a 2026-07-28 client that answers input is answered input_required with a URL elicitation of the approval page, then gets the result on its retry", async () => {
    const url = `${server.url}/mcp`
    const options = { key: keys.admin, capabilities: { elicitation: { form: {}, url: {} } } }
    const first = await within(modernRequest(url, "tools/call", { name: "svc__echo", arguments: { text: "modern" } }, options), 10_000, "first round")
    expect(first.response.result).toMatchObject({ resultType: "input_required" })
    const asked = first.response.result.inputRequests.input_1
    expect(asked).toMatchObject({ method: "elicitation/create", params: { mode: "url" } })
    const pending = await pendingFor({ text: "modern" })
    expect(asked.params.url).toBe(pending.approval_url)
    expect(asked.params.elicitationId).toBe(pending.approval_id)
    expect((await decide(pending.approval_id, "approve")).status).toBe(200)
    const retry = await within(
      modernRequest(url, "tools/call", { name: "svc__echo", arguments: { text: "modern" }, requestState: first.response.result.requestState, inputResponses: { input_1: { action: "accept" } } }, options),
      10_000,
      "retry"
    )
    expect(retry.response, JSON.stringify(retry.messages)).toMatchObject({ result: { content: [{ type: "text", text: "modern" }] } })

    // Declining the page denies the call.
    const again = await within(modernRequest(url, "tools/call", { name: "svc__echo", arguments: { text: "declined" } }, options), 10_000, "declined round")
    const declined = await pendingFor({ text: "declined" })
    const end = await within(
      modernRequest(url, "tools/call", { name: "svc__echo", arguments: { text: "declined" }, requestState: again.response.result.requestState, inputResponses: { input_1: { action: "decline" } } }, options),
      10_000,
      "declined retry"
    )
    expect(end.response.result).toMatchObject({ isError: true })
    expect(end.response.result.content[0].text).toContain(`denied by the caller (decline of the approval page) (approval ${declined.approval_id})`)
  })

  it("a 2026-07-28 client that declared only form elicitation is not sent the page's URL elicitation: its call waits for the approval", async () => {
    const options = { key: keys.admin, capabilities: { elicitation: { form: {} } } }
    const call = within(modernRequest(`${server.url}/mcp`, "tools/call", { name: "svc__echo", arguments: { text: "form only" } }, options), 10_000, "the call")
    const pending = await pendingFor({ text: "form only" })
    expect((await decide(pending.approval_id, "approve")).status).toBe(200)
    const answer = await call
    expect(answer.response, JSON.stringify(answer.messages)).toMatchObject({ result: { content: [{ type: "text", text: "form only" }] } })
  })

  it("the CLI lists the calls waiting and approves one, bound to the arguments it showed", async () => {
    const cli = async (...argv: string[]) => {
      let out = ""
      let err = ""
      const code = await runApprovals(["--url", server.url, "--api-key", keys.admin, ...argv], {}, { writeOut: (t) => void (out += t), writeErr: (t) => void (err += t) })
      return { code, out, err }
    }
    const call = admin.post("/for_store/call_tool", { tool_name: "svc__echo", args: { text: "from the terminal" } })
    const pending = await pendingFor({ text: "from the terminal" })
    const listed = await cli("list")
    expect(listed.code, listed.err).toBe(0)
    expect(listed.out).toContain(`${pending.approval_id}  svc__echo (store) by admin key 'admin'`)
    expect(listed.out).toContain(`sha256 ${pending.arguments_digest}`)
    const approved = await cli("approve", pending.approval_id)
    expect(approved.code, approved.err).toBe(0)
    expect(approved.out).toContain("was approved by admin key 'admin'")
    expect((await call).body.result).toBe("from the terminal")
    const again = await cli("deny", pending.approval_id)
    expect(again.code).toBe(1)
    expect(again.err).toContain("No call waits for approval")
    const agentCli = await runApprovals(["--url", server.url, "--api-key", keys.agent, "list"], {}, { writeOut: () => undefined, writeErr: () => undefined })
    expect(agentCli).toBe(1)
  })

  it("a 2025 session waits with progress that names the approval, and gets the result once approved", async () => {
    const transport = new StreamableHTTPClientTransport(new URL(`${server.url}/mcp`), { requestInit: { headers: { authorization: `Bearer ${keys.admin}` } } })
    const client = new Client({ name: "approvals-test", version: "1.0.0" })
    client.onerror = () => undefined
    await within(client.connect(transport), 10_000, "connect")
    try {
      const heard: string[] = []
      const result = client.callTool({ name: "svc__echo", arguments: { text: "session" } }, undefined, { onprogress: (p) => void heard.push(p.message ?? ""), timeout: 10_000 })
      const pending = await pendingFor({ text: "session" })
      expect(await eventually(() => heard.some((m) => m.includes(pending.approval_id) && m.includes(pending.approval_url!)), 5_000)).toBe(true)
      expect(pending.caller).toMatch(/^an MCP client/)
      expect((await decide(pending.approval_id, "approve")).status).toBe(200)
      expect((await within(result, 10_000, "call")).content).toEqual([{ type: "text", text: "session" }])
    } finally {
      await client.close()
    }
  })
})
