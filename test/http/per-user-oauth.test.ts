// Per-principal upstream OAuth over real HTTP (README, Per-user credentials): one store with a keys
// file and an OAuth-protected MCP fixture whose authorization server issues each user's own tokens
// (test/fixtures/oauth-server.ts, `login_hint`) and whose `whoami` tool answers the token's user. The
// operator authorizes the service's shared connection; two agent keys each authorize for themselves
// (browser callback, pasted code, the CLI) and each call, over REST or MCP, is seen upstream as its own user; a caller without an
// authorization is told the route (a service that also takes values: which of the two it lacks); a state of one principal presented by another does nothing; tokens
// are refreshed per principal, refused refresh tokens and DELETE send the caller back to authorizing,
// and a URL moved to another origin or the service's deletion drops every principal's tokens.
import { readdirSync, readFileSync, statSync } from "node:fs"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { Client } from "@modelcontextprotocol/sdk/client/index.js"
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js"
import { runAuth } from "../../src/cli/auth-command.js"
import { captureLogs, type CapturedLogs } from "../../src/logging/log.js"
import { serviceKey } from "../../src/runtime/upstream-oauth.js"
import { startOAuthFixture, type OAuthFixture } from "../fixtures/oauth-server.js"
import { createKey, approveAsUser, authedApi, callbackInBrowser, eventually, freshDir, startTestServer, within, type Api, type TestServer } from "../support/index.js"

const AGENT = "team"
const PREFIX = `/for_agent/${AGENT}`
const SCOPE = { kind: "agent", agentId: AGENT } as const

describe("per-principal upstream OAuth", () => {
  let fixture: OAuthFixture
  let server: TestServer
  let logs: CapturedLogs
  let admin: Api
  let alice: Api
  let bob: Api
  let eve: Api
  let reader: Api
  const dir = freshDir()
  const answers: string[] = []
  const keys: Record<string, string> = {}

  /** Every answer's text is kept, to grep it for tokens at the end. */
  const keep = <T extends { text: string }>(reply: T): T => {
    answers.push(reply.text)
    return reply
  }

  /** The principal's own authorize route: the authorization URL it answers. */
  const start = async (client: Api, service = "secure"): Promise<string> => {
    const started = keep(await client.post(`${PREFIX}/credentials/${service}/authorize`))
    expect(started.status, started.text).toBe(200)
    expect(started.body.state).toBe("authorizing")
    return started.body.authorization_url as string
  }

  /** The whole browser flow: the URL, the authorization server's redirect, the store's callback page and its question, answered. */
  const authorizeInBrowser = async (client: Api, user: string): Promise<void> => {
    const page = await callbackInBrowser(await approveAsUser(await start(client), user))
    expect(page.asked).toBe(true)
    expect(page.status).toBe(200)
    expect(page.text).toContain("your own token")
  }

  /** The upstream's `whoami` of a call: the user of the token the call came with. */
  const whoami = async (client: Api): Promise<string | null> => {
    const reply = keep(await client.post(`${PREFIX}/call_tool`, { tool_name: "secure__whoami", args: {} }))
    expect(reply.status, reply.text).toBe(200)
    return (JSON.parse(reply.body.content[0].text) as { user: string | null }).user
  }

  const refused = async (client: Api) => {
    const reply = keep(await client.post(`${PREFIX}/call_tool`, { tool_name: "secure__whoami", args: {} }))
    expect(reply.status, reply.text).toBe(403)
    expect(reply.body.error.code).toBe("CREDENTIALS_REQUIRED")
    return reply
  }

  beforeAll(async () => {
    logs = captureLogs({ format: "json" })
    fixture = await startOAuthFixture()
    const keysFile = join(dir, "mcp-store.keys.json")
    const made = [
      await createKey(keysFile, "--role", "admin", "--name", "ops"),
      await createKey(keysFile, "--role", "agent", "--agent", AGENT, "--name", "alice"),
      await createKey(keysFile, "--role", "agent", "--agent", AGENT, "--name", "bob"),
      await createKey(keysFile, "--role", "agent", "--agent", "other", "--name", "eve"),
      await createKey(keysFile, "--role", "reader", "--name", "dash")
    ]
    keys["alice"] = made[1] as string
    keys["bob"] = made[2] as string
    // No health check of the shared connection while a test expires every token and holds the
    // refreshes (its refresh would be held and refused with the principals', and the service end
    // unreachable): the tests wait on connections and calls, never on a check.
    server = await startTestServer({ dir, monitoring: { health_check_seconds: 30 } })
    ;[admin, alice, bob, eve, reader] = made.map((key) => authedApi(server.url, key)) as [Api, Api, Api, Api, Api]
    // The operator authorizes the service's shared connection (its tool list and health), as for any OAuth upstream.
    expect(keep(await admin.post(`${PREFIX}/add_service`, { name: "secure", url: fixture.url, per_user: { oauth: true } })).status).toBe(200)
    expect(keep(await admin.post(`${PREFIX}/wait_service`, { client_id_or_service_name: "secure", status: "unreachable", timeout: 15 })).status).toBe(200)
    const shared = keep(await admin.post(`${PREFIX}/authorize_service`, { service_name: "secure" }))
    expect(shared.status, shared.text).toBe(200)
    await (await fetch(await approveAsUser(shared.body.authorization_url as string, "operator"))).text()
    expect(keep(await admin.post(`${PREFIX}/wait_service`, { client_id_or_service_name: "secure", status: "healthy", timeout: 15 })).status).toBe(200)
  }, 30_000)

  afterAll(async () => {
    logs?.restore()
    await server?.cleanup()
    await fixture?.stop()
  }, 15_000)

  it("a definition's per_user.oauth is checked: true on a url service, never beside client credentials or an Authorization header", async () => {
    const local = keep(await admin.post(`${PREFIX}/add_service`, { name: "bad", command: "node", args: ["x.js"], per_user: { oauth: true } }))
    expect(local.status).toBe(400)
    expect(local.body.error.details.fields).toEqual([{ field: "per_user.oauth", problem: "is for a remote ('url') service: a local one has no OAuth" }])
    const notTrue = keep(await admin.post(`${PREFIX}/add_service`, { name: "bad", url: fixture.url, per_user: { oauth: "yes" } }))
    expect(notTrue.status).toBe(400)
    expect(notTrue.body.error.details.fields[0].field).toBe("per_user.oauth")
    const machine = keep(await admin.post(`${PREFIX}/add_service`, { name: "bad", url: fixture.url, per_user: { oauth: true }, oauth: { client_id: "c", client_secret: "s", grant_type: "client_credentials" } }))
    expect(machine.status).toBe(400)
    const header = keep(await admin.post(`${PREFIX}/add_service`, { name: "bad", url: fixture.url, per_user: { oauth: true, headers: ["Authorization"] } }))
    expect(header.status).toBe(400)
    const shared = keep(await admin.post(`${PREFIX}/add_service`, { name: "bad", url: fixture.url, headers: { Authorization: "Bearer everybody" }, per_user: { oauth: true } }))
    expect(shared.status).toBe(400)
    expect(shared.body.error.details.fields).toEqual([{ field: "headers.Authorization", problem: "must not be given beside per_user.oauth: each caller's own bearer token is that header" }])
    expect((await admin.get(`${PREFIX}/get_service_info?name=bad`)).status).toBe(404)
  })

  it("a caller that has not authorized is refused CREDENTIALS_REQUIRED, told the route that authorizes it", async () => {
    const reply = await refused(alice)
    expect(reply.body.error.details).toMatchObject({ service_name: "secure", oauth: true, headers: [], env: [], route: `POST ${PREFIX}/credentials/secure/authorize` })
    expect(reply.body.message).toContain(`POST ${PREFIX}/credentials/secure/authorize`)
    // Its values route has nothing to take: the service takes only an authorization.
    const put = keep(await alice.request("PUT", `${PREFIX}/credentials/secure`, { body: JSON.stringify({ headers: {} }), headers: { "content-type": "application/json" } }))
    expect(put.status).toBe(400)
    expect(put.body.message).toContain("/credentials/secure/authorize")
  })

  it("without the service-wide authorization the service lists no tools: a call is answered 503 naming the authorization it waits for", async () => {
    expect(keep(await admin.post(`${PREFIX}/add_service`, { name: "waiting", url: fixture.url, per_user: { oauth: true } })).status).toBe(200)
    expect(keep(await admin.post(`${PREFIX}/wait_service`, { client_id_or_service_name: "waiting", status: "unreachable", timeout: 15 })).status).toBe(200)
    const reply = keep(await alice.post(`${PREFIX}/call_tool`, { tool_name: "waiting__whoami", args: {} }))
    expect(reply.status, reply.text).toBe(503)
    expect(reply.body.error.code).toBe("SERVICE_UNAVAILABLE")
    expect(reply.text).toContain("authorize_service")
    keep(await admin.del(`${PREFIX}/delete_service/waiting`))
  })

  it("a principal authorizes for itself through the browser: its calls are its own user's upstream", async () => {
    const before = keep(await alice.get(`${PREFIX}/credentials/secure`))
    expect(before.status, before.text).toBe(200)
    expect(before.body).toMatchObject({ service_name: "secure", ready: false, oauth: { required: true, authorized: false, expires_at: null } })
    await authorizeInBrowser(alice, "alice")
    expect(await whoami(alice)).toBe("alice")
    // Her own status says so (a date, never a token); bob's (asked with his key) does not.
    const after = keep(await alice.get(`${PREFIX}/credentials/secure`))
    expect(after.body).toMatchObject({ ready: true, oauth: { required: true, authorized: true } })
    expect(Date.parse(after.body.oauth.expires_at)).toBeGreaterThan(Date.now())
    expect(keep(await bob.get(`${PREFIX}/credentials/secure`)).body).toMatchObject({ ready: false, oauth: { authorized: false } })
    // Bob has not: still refused, never given alice's (nor the operator's) token.
    await refused(bob)
    expect(logs.lines.some((l) => l.includes('"event":"credentials_authorizing"'))).toBe(true)
    expect(logs.lines.some((l) => l.includes('"event":"oauth_authorized"') && l.includes("for principal"))).toBe(true)
  })

  it("a state one principal started does nothing for another (nor for the service), and stays the starter's", async () => {
    const back = await approveAsUser(await start(alice), "alice")
    const pasted = { code: back.searchParams.get("code"), state: back.searchParams.get("state") }
    const stolen = keep(await bob.post(`${PREFIX}/credentials/secure/authorize`, pasted))
    expect(stolen.status).toBe(400)
    expect(stolen.body.error.details.fields[0]).toMatchObject({ field: "state", problem: expect.stringContaining("not started by you") })
    await refused(bob)
    const asService = keep(await admin.post(`${PREFIX}/authorize_service`, { service_name: "secure", ...pasted }))
    expect(asService.status).toBe(400)
    // The starter still finishes with it (paste-the-code), once.
    const own = keep(await alice.post(`${PREFIX}/credentials/secure/authorize`, pasted))
    expect(own.status, own.text).toBe(200)
    expect(own.body.state).toBe("authorized")
    expect((await alice.post(`${PREFIX}/credentials/secure/authorize`, pasted)).status).toBe(400)
    expect(await whoami(alice)).toBe("alice")
  })

  it("a URL one principal started, opened by someone else: the callback says whose it is and asks first; a cancel keeps nothing and spends it", async () => {
    // bob starts an authorization and sends its URL to someone else, who signs in upstream as "victim".
    const back = await approveAsUser(await start(bob), "victim")
    const asked = await fetch(back, { redirect: "manual" })
    expect(asked.status).toBe(200)
    expect(asked.headers.get("content-security-policy")).toBe("default-src 'none'; form-action 'self'; frame-ancestors 'none'")
    const page = await asked.text()
    expect(page).toContain("agent &#39;team&#39; key &#39;bob&#39; asked to use your account of service &#39;secure&#39;")
    expect(page).toContain('<form method="post" action="callback">')
    // The GET finishes nothing.
    await refused(bob)
    const cancelled = await callbackInBrowser(back, "cancel")
    expect(cancelled).toMatchObject({ status: 200, asked: true })
    expect(cancelled.text).toContain("Cancelled: your account was not connected")
    await refused(bob)
    expect(logs.lines.some((l) => l.includes('"event":"oauth_cancelled"'))).toBe(true)
    // The state is spent: the same answer, or the page again, finishes nothing.
    const again = await callbackInBrowser(back, "connect")
    expect(again).toMatchObject({ status: 400, asked: false })
    await refused(bob)
    // A form posted from another site is refused before it is read (the request guard: its Origin).
    const other = await approveAsUser(await start(bob), "victim")
    const forged = await fetch(new URL("/oauth/callback", server.url), {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded", origin: "https://attacker.example" },
      body: new URLSearchParams({ code: other.searchParams.get("code") ?? "", state: other.searchParams.get("state") ?? "", decision: "connect" }).toString()
    })
    expect(forged.status).toBe(403)
    await refused(bob)
  })

  it("a service's own authorization started by an agent's key asks too (an admin's finishes at once); cancelled, the service keeps its authorization", async () => {
    const started = keep(await alice.post(`${PREFIX}/authorize_service`, { service_name: "secure" }))
    expect(started.status, started.text).toBe(200)
    const back = await approveAsUser(started.body.authorization_url as string, "victim")
    const page = await (await fetch(back, { redirect: "manual" })).text()
    expect(page).toContain("agent &#39;team&#39; key &#39;alice&#39; asked to use your account of service &#39;secure&#39;: once you connect it, calls of &#39;secure&#39; through this store act as")
    expect(await callbackInBrowser(back, "cancel")).toMatchObject({ status: 200, asked: true })
    // The shared connection still has the operator's authorization.
    expect(keep(await admin.post(`${PREFIX}/wait_service`, { client_id_or_service_name: "secure", status: "healthy", timeout: 5 })).status).toBe(200)
    expect(await whoami(alice)).toBe("alice")
  })

  it("two principals authorized (browser and pasted code) call the same service at once, each as its own user", async () => {
    const back = await approveAsUser(await start(bob), "bob")
    const done = keep(await bob.post(`${PREFIX}/credentials/secure/authorize`, { code: back.searchParams.get("code"), state: back.searchParams.get("state") }))
    expect(done.status, done.text).toBe(200)
    const users = await Promise.all([whoami(alice), whoami(bob), whoami(alice), whoami(bob)])
    expect(users).toEqual(["alice", "bob", "alice", "bob"])
  })

  it("over MCP (the agent's endpoint), each key's calls carry its own token too", async () => {
    const seen: Record<string, string | null> = {}
    for (const who of ["alice", "bob"]) {
      const transport = new StreamableHTTPClientTransport(new URL(`${server.url}${PREFIX}/mcp`), { requestInit: { headers: { authorization: `Bearer ${keys[who]}` } } })
      const client = new Client({ name: "per-user-oauth-test", version: "1.0.0" })
      client.onerror = () => undefined
      await within(client.connect(transport), 10_000, "connect")
      try {
        const result = (await client.callTool({ name: "secure__whoami", arguments: {} }, undefined, { timeout: 10_000 })) as { content: Array<{ text: string }> }
        answers.push(JSON.stringify(result))
        seen[who] = (JSON.parse(result.content[0]!.text) as { user: string | null }).user
      } finally {
        await client.close()
      }
    }
    expect(seen).toEqual({ alice: "alice", bob: "bob" })
  })

  it("refreshes each principal's token on its own when the upstream refuses it (one refresh per principal)", async () => {
    const before = { ...fixture.refreshesOf }
    fixture.expireAll()
    const users = await Promise.all([whoami(alice), whoami(alice), whoami(alice), whoami(bob), whoami(bob), whoami(bob)])
    expect(users).toEqual(["alice", "alice", "alice", "bob", "bob", "bob"])
    expect(fixture.refreshesOf["alice"]).toBe((before["alice"] ?? 0) + 1)
    expect(fixture.refreshesOf["bob"]).toBe((before["bob"] ?? 0) + 1)
  })

  it("a principal whose refresh token is refused is sent back to authorizing; the others go on", async () => {
    fixture.revokeUser("bob")
    const reply = await refused(bob)
    expect(reply.body.error.details.route).toBe(`POST ${PREFIX}/credentials/secure/authorize`)
    await refused(bob)
    expect(await whoami(alice)).toBe("alice")
    expect(logs.lines.some((l) => l.includes('"event":"oauth_refresh_failed"') && l.includes("invalid_grant"))).toBe(true)
    await authorizeInBrowser(bob, "bob")
    expect(await whoami(bob)).toBe("bob")
  })

  it("nothing of it is reachable by another agent's key or a reader", async () => {
    expect(keep(await eve.post(`${PREFIX}/credentials/secure/authorize`)).status).toBe(403)
    expect(keep(await reader.post(`${PREFIX}/credentials/secure/authorize`)).status).toBe(403)
    expect(keep(await eve.del(`${PREFIX}/credentials/secure`)).status).toBe(403)
    expect(keep(await eve.get(`${PREFIX}/credentials/secure`)).status).toBe(403)
    // A service not taken per user: its own authorize route is authorize_service.
    expect(keep(await admin.post(`${PREFIX}/add_service`, { name: "plain", url: fixture.url })).status).toBe(200)
    const plain = keep(await alice.post(`${PREFIX}/credentials/plain/authorize`))
    expect(plain.status).toBe(400)
    expect(plain.body.error.details.fields[0].field).toBe("service_name")
    expect(keep(await alice.post(`${PREFIX}/credentials/nope/authorize`)).status).toBe(404)
    expect(keep(await alice.post(`${PREFIX}/credentials/secure/authorize`, { redirect_uri: "https://attacker.example/cb" })).status).toBe(400)
    expect(keep(await alice.post(`${PREFIX}/credentials/secure/authorize`, { code: "x" })).status).toBe(400)
    expect(keep(await alice.post(`${PREFIX}/credentials/secure/authorize`, { nope: 1 })).status).toBe(400)
    expect(await whoami(alice)).toBe("alice")
  })

  it("a service that takes values and an authorization says which the caller lacks: both, then the authorization once the values are given", async () => {
    expect(keep(await admin.post(`${PREFIX}/add_service`, { name: "mixed", url: fixture.url, per_user: { headers: ["X-Tenant"], oauth: true } })).status).toBe(200)
    expect(keep(await admin.post(`${PREFIX}/wait_service`, { client_id_or_service_name: "mixed", status: "unreachable", timeout: 15 })).status).toBe(200)
    const shared = keep(await admin.post(`${PREFIX}/authorize_service`, { service_name: "mixed" }))
    await (await fetch(await approveAsUser(shared.body.authorization_url as string, "operator"))).text()
    expect(keep(await admin.post(`${PREFIX}/wait_service`, { client_id_or_service_name: "mixed", status: "healthy", timeout: 15 })).status).toBe(200)
    const call = async () => keep(await alice.post(`${PREFIX}/call_tool`, { tool_name: "mixed__whoami", args: {} }))
    const values = `PUT ${PREFIX}/credentials/mixed`
    const authorize = `POST ${PREFIX}/credentials/mixed/authorize`

    const neither = await call()
    expect(neither.status, neither.text).toBe(403)
    expect(neither.body.error.details).toMatchObject({ oauth: true, headers: ["X-Tenant"], missing: ["values", "authorization"], route: values })
    expect(neither.body.message).toContain(values)
    expect(neither.body.message).toContain(authorize)

    const put = keep(await alice.request("PUT", `${PREFIX}/credentials/mixed`, { body: JSON.stringify({ headers: { "X-Tenant": "acme" } }), headers: { "content-type": "application/json" } }))
    expect(put.status, put.text).toBe(200)
    const unauthorized = await call()
    expect(unauthorized.status, unauthorized.text).toBe(403)
    expect(unauthorized.body.error.details).toMatchObject({ missing: ["authorization"], route: authorize })
    expect(unauthorized.body.message).toContain(authorize)
    expect(unauthorized.body.message).not.toContain(values)

    const page = await callbackInBrowser(await approveAsUser(await start(alice, "mixed"), "alice"))
    expect(page.status, page.text).toBe(200)
    const answered = await call()
    expect(answered.status, answered.text).toBe(200)
    expect(JSON.parse(answered.body.content[0].text).user).toBe("alice")
  })

  it("DELETE drops the principal's tokens: its next call must authorize again", async () => {
    const vault = server.running.store.oauth.vault
    const under = `${serviceKey(SCOPE, "secure")}\u0000`
    expect(vault.entriesUnder(under).filter((e) => e.tokens !== undefined)).toHaveLength(2)
    const deleted = keep(await alice.del(`${PREFIX}/credentials/secure`))
    expect(deleted.status, deleted.text).toBe(200)
    expect(deleted.body.message).toContain("deleted")
    await refused(alice)
    expect(vault.entriesUnder(under)).toHaveLength(1)
    expect(keep(await alice.get(`${PREFIX}/credentials/secure`)).body).toMatchObject({ ready: false, oauth: { authorized: false } })
    expect(await whoami(bob)).toBe("bob")
  })

  it("a definition without per_user.oauth, or a URL moved to another origin, drops every principal's tokens (a store service, authorized by an admin key for itself)", async () => {
    const vault = server.running.store.oauth.vault
    const under = `${serviceKey({ kind: "store" }, "moving")}\u0000`
    expect(keep(await admin.post("/for_store/add_service", { name: "moving", url: fixture.url, per_user: { oauth: true } })).status).toBe(200)
    const shared = keep(await admin.post("/for_store/authorize_service", { service_name: "moving" }))
    await (await fetch(await approveAsUser(shared.body.authorization_url as string, "operator"))).text()
    expect(keep(await admin.post("/for_store/wait_service", { client_id_or_service_name: "moving", status: "healthy", timeout: 15 })).status).toBe(200)
    const own = keep(await admin.post("/for_store/credentials/moving/authorize"))
    expect(own.status, own.text).toBe(200)
    expect((await callbackInBrowser(await approveAsUser(own.body.authorization_url as string, "ops"))).status).toBe(200)
    const call = keep(await admin.post("/for_store/call_tool", { tool_name: "moving__whoami", args: {} }))
    expect(call.status, call.text).toBe(200)
    expect(JSON.parse(call.body.content[0].text).user).toBe("ops")
    expect(vault.entriesUnder(under)).toHaveLength(1)
    const update = async (definition: Record<string, unknown>) =>
      keep(await admin.request("PUT", "/for_store/update_service/moving", { body: JSON.stringify(definition), headers: { "content-type": "application/json" } }))
    // Shared by everybody now: the principals' own tokens have no use left, and are dropped at its next connect.
    expect((await update({ url: fixture.url })).status).toBe(200)
    expect(await eventually(() => vault.entriesUnder(under).length === 0, 10_000)).toBe(true)
    expect((await update({ url: fixture.url, per_user: { oauth: true } })).status).toBe(200)
    expect(keep(await admin.post("/for_store/wait_service", { client_id_or_service_name: "moving", status: "healthy", timeout: 15 })).status).toBe(200)
    const again = keep(await admin.post("/for_store/credentials/moving/authorize"))
    expect((await callbackInBrowser(await approveAsUser(again.body.authorization_url as string, "ops"))).status).toBe(200)
    expect(vault.entriesUnder(under)).toHaveLength(1)
    const moved = keep(
      await admin.request("PUT", "/for_store/update_service/moving", { body: JSON.stringify({ url: fixture.otherOriginUrl }), headers: { "content-type": "application/json" } })
    )
    expect(moved.status, moved.text).toBe(200)
    expect(await eventually(() => vault.entriesUnder(under).length === 0, 10_000)).toBe(true)
    keep(await admin.del("/for_store/delete_service/moving"))
  })

  it("a DELETE while the principal's refresh is under way: the refreshed token is not kept, the call is sent back to authorizing", async () => {
    const vault = server.running.store.oauth.vault
    const under = `${serviceKey(SCOPE, "secure")}\u0000`
    await authorizeInBrowser(alice, "alice")
    expect(vault.entriesUnder(under)).toHaveLength(2)
    const refreshes = fixture.refreshesOf["alice"] ?? 0
    const release = fixture.holdRefreshes()
    try {
      fixture.expireAll()
      const refusedBefore = fixture.counts.unauthorized
      const call = alice.post(`${PREFIX}/call_tool`, { tool_name: "secure__whoami", args: {} })
      // The upstream refused the call's token: its refresh is now held at the token endpoint.
      expect(await eventually(() => fixture.counts.unauthorized > refusedBefore, 5_000)).toBe(true)
      expect(keep(await alice.del(`${PREFIX}/credentials/secure`)).status).toBe(200)
      release()
      const reply = keep(await call)
      expect(reply.status, reply.text).toBe(403)
      expect(reply.body.error.code).toBe("CREDENTIALS_REQUIRED")
    } finally {
      release()
    }
    expect(await eventually(() => (fixture.refreshesOf["alice"] ?? 0) > refreshes, 5_000)).toBe(true)
    expect(vault.entriesUnder(under)).toHaveLength(1)
    await refused(alice)
  })

  it("the service's deletion drops every principal's tokens (alice authorized from a terminal: mcp-store auth --mine)", async () => {
    const vault = server.running.store.oauth.vault
    const under = `${serviceKey(SCOPE, "secure")}\u0000`
    const out: string[] = []
    const code = await runAuth(["secure", "--agent", AGENT, "--mine", "--url", server.url, "--api-key", keys["alice"] as string, "--open", "--timeout", "10"], {}, {
      writeOut: (t) => void out.push(t),
      writeErr: (t) => void out.push(t),
      // The "browser": alice agrees, and the authorization server sends it back to the store's callback.
      openBrowser: async (url) => void (await callbackInBrowser(await approveAsUser(url, "alice")))
    })
    answers.push(out.join(""))
    expect(out.join("")).toContain('The store\'s page then asks whose account it is: answer "Connect my account".')
    expect(out.join("")).toContain("authorized for your key")
    expect(code).toBe(0)
    expect(await whoami(alice)).toBe("alice")
    expect(vault.entriesUnder(under)).toHaveLength(2)
    expect(keep(await admin.del(`${PREFIX}/delete_service/secure`)).status).toBe(200)
    expect(await eventually(() => vault.entriesUnder(under).length === 0 && vault.find(serviceKey(SCOPE, "secure")) === undefined, 5_000)).toBe(true)
  })

  it("never shows a token in an answer, a log line or a file of the store", async () => {
    const files = readdirSync(dir)
      .map((f) => join(dir, f))
      .filter((f) => statSync(f).isFile())
      .map((f) => readFileSync(f, "utf8"))
    const haystacks = [...answers, ...logs.lines, ...files]
    expect(fixture.issued.length).toBeGreaterThan(6)
    for (const token of fixture.issued) expect(haystacks.filter((h) => h.includes(token)).map((h) => h.slice(0, 300))).toEqual([])
  })
})
