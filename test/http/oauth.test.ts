/**
 * Upstream OAuth end to end, as a user drives it: an OAuth-protected MCP server on 127.0.0.1 (the
 * SDK's mcpAuthRouter and requireBearerAuth), a store that sees `needs_authorization`, the
 * authorization URL followed to the store's callback, a refresh when the short-lived token
 * expires, revocation back to `needs_authorization` with an alert, paste-the-code, a restart that
 * reuses the encrypted token, client credentials, and no token anywhere it must not be.
 */
import { readdirSync, readFileSync, statSync } from "node:fs"
import { createServer } from "node:http"
import type { AddressInfo } from "node:net"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { runAuth } from "../../src/cli/auth-command.js"
import { captureLogs, type CapturedLogs } from "../../src/logging/log.js"
import { MAX_PENDING } from "../../src/runtime/upstream-oauth.js"
import { MACHINE_CLIENT, startOAuthFixture, type OAuthFixture } from "../fixtures/oauth-server.js"
import { eventually, freshDir, startTestServer, type TestServer } from "../support/index.js"

let fixture: OAuthFixture
let logs: CapturedLogs
const answers: string[] = []

beforeAll(async () => {
  logs = captureLogs()
  fixture = await startOAuthFixture({ accessTtlSeconds: 2 })
})
afterAll(async () => {
  logs.restore()
  await fixture.stop()
})

/** Every answer's text is kept, to grep it for tokens at the end. */
const keep = <T extends { body: unknown }>(reply: T): T => {
  answers.push(JSON.stringify(reply.body))
  return reply
}

const waitFor = async (server: TestServer, name: string, status: string) =>
  keep(await server.post("/for_store/wait_service", { client_id_or_service_name: name, status, timeout: 15 }))

const serviceOf = async (server: TestServer, name: string) => {
  const list = keep(await server.get("/for_store/list_services"))
  return (list.body.services as Array<{ name: string; status: string; auth?: { state: string; authorization_url?: string; expires_at?: string } }>).find((s) => s.name === name)
}

/** Follows an authorization URL as a browser would, up to the redirect back to the store. */
const approve = async (authorizationUrl: string): Promise<URL> => {
  const answer = await fetch(authorizationUrl, { redirect: "manual" })
  expect(answer.status).toBe(302)
  return new URL(answer.headers.get("location") as string)
}

/** authorize_service, the authorization URL followed as a browser would, and the store's callback page. */
const authorizeInBrowser = async (server: TestServer, name: string): Promise<void> => {
  const started = keep(await server.post("/for_store/authorize_service", { service_name: name }))
  expect(started.status).toBe(200)
  const page = await fetch(await approve(started.body.authorization_url as string), { redirect: "manual" })
  expect(page.status).toBe(200)
  await page.text()
}

/** A service of the fixture added to `server`, authorized through the browser, and healthy. */
const authorizedService = async (server: TestServer, name: string): Promise<void> => {
  keep(await server.post("/for_store/add_service", { name, url: fixture.url }))
  expect((await waitFor(server, name, "unreachable")).status).toBe(200)
  await authorizeInBrowser(server, name)
  expect((await waitFor(server, name, "healthy")).status).toBe(200)
}

describe("an OAuth-protected upstream", () => {
  const dir = freshDir()
  let server: TestServer

  afterAll(async () => {
    await server?.cleanup()
  })

  it("is authorized through the store, refreshed, revoked, pasted back, and reused after a restart", { timeout: 60_000 }, async () => {
    server = await startTestServer({ dir })
    keep(await server.post("/for_store/add_service", { name: "secure", url: fixture.url }))
    expect((await waitFor(server, "secure", "unreachable")).status).toBe(200)
    let view = await serviceOf(server, "secure")
    expect(view?.auth?.state).toBe("needs_authorization")
    const status = keep(await server.get("/for_store/service_status/secure"))
    // Waiting for a user: no retry planned.
    expect(status.body.next_retry_at).toBeNull()
    const mcpBefore = fixture.counts.mcp

    // Browser flow: the URL, the authorization server's redirect, the store's callback.
    const started = keep(await server.post("/for_store/authorize_service", { service_name: "secure" }))
    expect(started.status).toBe(200)
    expect(started.body.state).toBe("authorizing")
    expect((await serviceOf(server, "secure"))?.auth?.state).toBe("authorizing")
    const back = await approve(started.body.authorization_url as string)
    expect(`${back.origin}${back.pathname}`).toBe(`${server.url}/oauth/callback`)
    const page = await fetch(back, { redirect: "manual" })
    expect(page.status).toBe(200)
    expect(page.headers.get("content-security-policy")).toBe("default-src 'none'; form-action 'self'; frame-ancestors 'none'")
    await page.text()
    // The state is single use.
    expect((await fetch(back)).status).toBe(400)

    expect((await waitFor(server, "secure", "healthy")).status).toBe(200)
    expect(fixture.counts.mcp).toBeGreaterThan(mcpBefore)
    view = await serviceOf(server, "secure")
    expect(view?.auth?.state).toBe("authorized")
    const call = keep(await server.post("/for_store/call_tool", { tool_name: "secure__echo", arguments: { text: "hi" } }))
    expect(call.status).toBe(200)

    // The 2 s token is refreshed before it runs out (health checks every 0.5 s use it).
    expect(await eventually(() => fixture.counts.refresh_token >= 2, 15_000)).toBe(true)
    expect(keep(await server.post("/for_store/call_tool", { tool_name: "secure__echo", arguments: { text: "again" } })).status).toBe(200)

    // Revoked: the refresh fails with invalid_grant, the service waits for a user, with an alert.
    fixture.revokeAll()
    expect((await waitFor(server, "secure", "unreachable")).status).toBe(200)
    expect(await eventually(async () => (await serviceOf(server, "secure"))?.auth?.state === "needs_authorization", 5_000)).toBe(true)
    expect(server.running.monitor.alerts().some((a) => a.service_name === "secure" && !a.resolved && /invalid_grant/.test(a.message))).toBe(true)

    // Paste-the-code: the code and state given back by hand.
    const again = keep(await server.post("/for_store/authorize_service", { service_name: "secure" }))
    const pasted = await approve(again.body.authorization_url as string)
    const wrong = keep(await server.post("/for_store/authorize_service", { service_name: "secure", code: "x", state: "not-a-state" }))
    expect(wrong.status).toBe(400)
    const done = keep(
      await server.post("/for_store/authorize_service", {
        service_name: "secure",
        code: pasted.searchParams.get("code"),
        state: pasted.searchParams.get("state")
      })
    )
    expect(done.status).toBe(200)
    expect(done.body.state).toBe("authorized")
    expect((await waitFor(server, "secure", "healthy")).status).toBe(200)

    // A restart reuses the encrypted tokens: no new authorization.
    await server.close()
    const authorizations = fixture.counts.authorize
    fixture.accessTtlSeconds = 3600
    // Pings given long to answer from here on: in the single-flight test below a ping that meets the
    // held refresh waits for it, and three pings timed out would make the service reconnect, refusing
    // the calls that arrive meanwhile (on a loaded machine the six calls take seconds to arrive).
    server = await startTestServer({ dir, monitoring: { ping_timeout_seconds: 30 } })
    expect((await waitFor(server, "secure", "healthy")).status).toBe(200)
    expect(fixture.counts.authorize).toBe(authorizations)
  })

  it("refreshes once for many calls refused at once (single flight)", { timeout: 30_000 }, async () => {
    // Only "secure" exists yet: every refresh counted is its own.
    expect((await waitFor(server, "secure", "healthy")).status).toBe(200)
    // The token held is the long one: the 2 s token of the authorization above is refreshed by the first
    // uses after the restart, but on a loaded machine maybe not yet, and a token that near its end is
    // refreshed before the calls are sent, so none would be refused (the single flight the same).
    const lasting = async () => Date.parse((await serviceOf(server, "secure"))?.auth?.expires_at ?? "") > Date.now() + 60_000
    expect(await eventually(lasting, 15_000)).toBe(true)
    const refreshes = fixture.counts.refresh_token
    const refused = fixture.counts.unauthorized
    const release = fixture.holdRefreshes()
    try {
      fixture.expireAll()
      const calls = Array.from({ length: 6 }, (_, i) => server.post("/for_store/call_tool", { tool_name: "secure__echo", arguments: { text: `p${i}` } }))
      // Every call is in the store while the one refresh is held at the token endpoint: refused by the
      // upstream, or waiting for the refresh a health check's refused ping started first, or waiting for
      // the service that ping left reconnecting (on a loaded machine a ping can come first).
      const store = server.running.store
      const held = await eventually(() => fixture.counts.unauthorized > refused && store.inFlightCalls + store.waiters.active >= 6, 20_000)
      const status = (await serviceOf(server, "secure"))?.status
      expect(held, JSON.stringify({ refused: fixture.counts.unauthorized - refused, inFlight: store.inFlightCalls, waiting: store.waiters.active, status })).toBe(true)
      release()
      for (const call of await Promise.all(calls)) expect(keep(call).status).toBe(200)
      expect(fixture.counts.refresh_token).toBe(refreshes + 1)
    } finally {
      // Never left held: the next tests refresh too.
      release()
    }
  })

  it("connects with client credentials", { timeout: 30_000 }, async () => {
    keep(
      await server.post("/for_store/add_service", {
        name: "machine",
        url: fixture.url,
        oauth: { client_id: MACHINE_CLIENT.client_id, client_secret: MACHINE_CLIENT.client_secret, grant_type: "client_credentials" }
      })
    )
    expect((await waitFor(server, "machine", "healthy")).status).toBe(200)
    expect(fixture.counts.client_credentials).toBeGreaterThan(0)
    expect(keep(await server.post("/for_store/call_tool", { tool_name: "machine__echo", arguments: { text: "m" } })).status).toBe(200)
  })

  it("expands ${VAR} references in the oauth client's id and secret, and never shows the value", { timeout: 30_000 }, async () => {
    process.env["MCPSTORE_TEST_OAUTH_SECRET"] = MACHINE_CLIENT.client_secret
    try {
      const oauth = { client_id: MACHINE_CLIENT.client_id, client_secret: "${MCPSTORE_TEST_OAUTH_SECRET}", grant_type: "client_credentials" }
      keep(await server.post("/for_store/add_service", { name: "machine-ref", url: fixture.url, oauth }))
      expect((await waitFor(server, "machine-ref", "healthy")).status).toBe(200)
      const info = keep(await server.get("/for_store/get_service_info?name=machine-ref"))
      expect(info.body.service.config.oauth.client_secret).not.toContain(MACHINE_CLIENT.client_secret)
      // An unset variable: a permanent failure naming it.
      keep(await server.post("/for_store/add_service", { name: "machine-unset", url: fixture.url, oauth: { ...oauth, client_secret: "${MCPSTORE_TEST_OAUTH_UNSET}" } }))
      expect(
        await eventually(async () => /oauth\.client_secret refers to the variable MCPSTORE_TEST_OAUTH_UNSET/.test(keep(await server.get("/for_store/service_status/machine-unset")).body.last_error ?? ""), 15_000)
      ).toBe(true)
    } finally {
      delete process.env["MCPSTORE_TEST_OAUTH_SECRET"]
      keep(await server.del("/for_store/delete_service/machine-ref"))
      keep(await server.del("/for_store/delete_service/machine-unset"))
    }
  })

  it("sends client credentials only to the pinned issuer", { timeout: 30_000 }, async () => {
    const grants = fixture.counts.client_credentials
    const oauth = { client_id: MACHINE_CLIENT.client_id, client_secret: MACHINE_CLIENT.client_secret, grant_type: "client_credentials" }
    keep(await server.post("/for_store/add_service", { name: "pinned-elsewhere", url: fixture.url, oauth: { ...oauth, issuer: "https://auth.example.com" } }))
    expect(
      await eventually(async () => /bound to authorization server https:\/\/auth\.example\.com/.test(keep(await server.get("/for_store/service_status/pinned-elsewhere")).body.last_error ?? ""), 15_000)
    ).toBe(true)
    expect(fixture.counts.client_credentials).toBe(grants)
    keep(await server.del("/for_store/delete_service/pinned-elsewhere"))
    keep(await server.post("/for_store/add_service", { name: "pinned", url: fixture.url, oauth: { ...oauth, issuer: new URL(fixture.url).origin } }))
    expect((await waitFor(server, "pinned", "healthy")).status).toBe(200)
    expect(fixture.counts.client_credentials).toBeGreaterThan(grants)
  })

  it("authorizes, refreshes and uses an SSE upstream as it does a Streamable HTTP one", { timeout: 30_000 }, async () => {
    fixture.accessTtlSeconds = 2
    try {
      keep(await server.post("/for_store/add_service", { name: "legacy", url: fixture.sseUrl }))
      expect((await waitFor(server, "legacy", "unreachable")).status).toBe(200)
      expect((await serviceOf(server, "legacy"))?.auth?.state).toBe("needs_authorization")
      expect(keep(await server.get("/for_store/service_status/legacy")).body.next_retry_at).toBeNull()
      await authorizeInBrowser(server, "legacy")
      expect((await waitFor(server, "legacy", "healthy")).status).toBe(200)
      expect((await serviceOf(server, "legacy"))?.auth?.state).toBe("authorized")
      expect(keep(await server.post("/for_store/call_tool", { tool_name: "legacy__echo", arguments: { text: "sse" } })).status).toBe(200)
      // The 2 s token is refreshed by the health checks' pings, over the SSE transport's POSTs.
      const refreshed = fixture.counts.refresh_token
      expect(await eventually(() => fixture.counts.refresh_token >= refreshed + 2, 15_000)).toBe(true)
      expect(keep(await server.post("/for_store/call_tool", { tool_name: "legacy__echo", arguments: { text: "sse again" } })).status).toBe(200)
    } finally {
      fixture.accessTtlSeconds = 3600
    }
  })

  it("is authorized from a terminal: mcp-store auth <service> --open", { timeout: 30_000 }, async () => {
    keep(await server.post("/for_store/add_service", { name: "terminal", url: fixture.url }))
    expect((await waitFor(server, "terminal", "unreachable")).status).toBe(200)
    const out: string[] = []
    const code = await runAuth(["terminal", "--url", server.url, "--open", "--timeout", "15"], {}, {
      writeOut: (t) => void out.push(t),
      writeErr: (t) => void out.push(t),
      // The "browser": follows the authorization server's redirect to the store's callback.
      openBrowser: async (url) => void (await (await fetch(await approve(url))).text())
    })
    answers.push(out.join(""))
    expect(out.join("")).toContain("authorized and healthy")
    expect(code).toBe(0)
  })

  it("drops the tokens when update_service moves the URL to another origin: the next connect needs authorization", { timeout: 30_000 }, async () => {
    await authorizedService(server, "moved")
    const vault = server.running.store.oauth.vault
    expect(vault.find("store/moved")?.tokens).toBeDefined()
    // The other origin's server would take the same token: only the drop keeps it from going there.
    const unauthorized = fixture.counts.unauthorized
    const moved = await server.request("PUT", "/for_store/update_service/moved", {
      body: JSON.stringify({ url: fixture.otherOriginUrl }),
      headers: { "content-type": "application/json" }
    })
    expect(keep(moved).status).toBe(200)
    expect(await eventually(async () => (await serviceOf(server, "moved"))?.auth?.state === "needs_authorization", 10_000)).toBe(true)
    expect((await waitFor(server, "moved", "unreachable")).status).toBe(200)
    expect(vault.find("store/moved")).toBeUndefined()
    expect(fixture.counts.unauthorized).toBeGreaterThan(unauthorized)
  })

  it("keeps the tokens' client while a flow for another redirect URI registers its own: refreshed as before, and as the new client once that flow is finished", { timeout: 60_000 }, async () => {
    const ttl = fixture.accessTtlSeconds
    fixture.accessTtlSeconds = 2
    try {
      await authorizedService(server, "two-uris")
      const vault = server.running.store.oauth.vault
      const first = vault.find("store/two-uris")?.client?.client_id
      expect(first).toBeDefined()
      /** Waits for this service's tokens to be refreshed twice (the fixture's count is every service's). */
      const refreshedAfter = async (what: string) => {
        for (let i = 0; i < 2; i++) {
          const held = vault.find("store/two-uris")?.tokens?.access_token
          expect(held, what).toBeDefined()
          const renewed = () => ![undefined, held].includes(vault.find("store/two-uris")?.tokens?.access_token)
          expect(await eventually(renewed, 15_000), what).toBe(true)
        }
        expect((await serviceOf(server, "two-uris"))?.auth?.state, what).toBe("authorized")
      }
      // A flow from a terminal (a loopback redirect URI the first client does not list) registers a
      // second client, and is left unfinished: the tokens are still refreshed as the first.
      const loopback = keep(await server.post("/for_store/authorize_service", { service_name: "two-uris", redirect_uri: "http://127.0.0.1:9/cb" }))
      expect(loopback.status).toBe(200)
      await refreshedAfter("refreshed while another client's flow is under way")
      expect(vault.find("store/two-uris")?.client?.client_id).toBe(first)
      // Finished (the code pasted back): the tokens and the client change together.
      const back = await approve(loopback.body.authorization_url as string)
      expect(`${back.origin}${back.pathname}`).toBe("http://127.0.0.1:9/cb")
      const done = keep(await server.post("/for_store/authorize_service", { service_name: "two-uris", code: back.searchParams.get("code"), state: back.searchParams.get("state") }))
      expect(done.status, JSON.stringify(done.body)).toBe(200)
      const second = vault.find("store/two-uris")?.client?.client_id
      expect(second).toBeDefined()
      expect(second).not.toBe(first)
      await refreshedAfter("refreshed as the client of the finished flow")
      expect(keep(await server.post("/for_store/call_tool", { tool_name: "two-uris__echo", arguments: { text: "hi" } })).status).toBe(200)
    } finally {
      fixture.accessTtlSeconds = ttl
    }
  })

  it("keeps the tokens of an authorization finished while a refresh of the old ones was under way, whether that refresh is refused or not", { timeout: 60_000 }, async () => {
    await authorizedService(server, "overtaken")
    const vault = server.running.store.oauth.vault
    const tokens = () => vault.find("store/overtaken")?.tokens?.access_token
    const superseded = () => logs.lines.filter((l) => l.includes("overtaken") && l.includes("an authorization finished meanwhile")).length
    for (const refused of [true, false]) {
      const first = tokens()
      const supersededBefore = superseded()
      const asked = fixture.counts.refresh_asked
      const release = fixture.holdRefreshes()
      let call: Promise<unknown> | undefined
      let second: string | undefined
      try {
        // The upstream refuses the token: the store refreshes it, and the refresh waits at the token endpoint.
        fixture.expireAll()
        call = server.post("/for_store/call_tool", { tool_name: "overtaken__echo", arguments: { text: "during" } })
        expect(await eventually(() => fixture.counts.refresh_asked > asked, 15_000)).toBe(true)
        // Meanwhile the service is authorized again, and (the first time) the old refresh token is revoked.
        if (refused) fixture.revokeAll()
        await authorizeInBrowser(server, "overtaken")
        second = tokens()
        expect(second).toBeDefined()
        expect(second).not.toBe(first)
      } finally {
        release()
      }
      // The call waited for the refresh, which ended (refused with invalid_grant, or with tokens of its own): the new authorization's stay.
      await call
      expect(tokens(), `refused: ${refused}`).toBe(second)
      expect(superseded(), `refused: ${refused}`).toBeGreaterThan(supersededBefore)
      expect((await serviceOf(server, "overtaken"))?.auth?.state).toBe("authorized")
      expect(keep(await server.post("/for_store/call_tool", { tool_name: "overtaken__echo", arguments: { text: "after" } })).status).toBe(200)
    }
  })

  it("keeps each scope's authorizations under way apart: one agent filling its cap does not block another", { timeout: 60_000 }, async () => {
    for (const agent of ["crowd", "calm"]) {
      expect(keep(await server.post(`/for_agent/${agent}/add_service`, { name: "shared", url: fixture.url })).status).toBe(200)
      expect(keep(await server.post(`/for_agent/${agent}/wait_service`, { client_id_or_service_name: "shared", status: "unreachable", timeout: 15 })).status).toBe(200)
    }
    const start = async (agent: string) => {
      const started = keep(await server.post(`/for_agent/${agent}/authorize_service`, { service_name: "shared" }))
      expect(started.status).toBe(200)
      return started.body.authorization_url as string
    }
    const calm = await start("calm")
    const crowdFirst = await start("crowd")
    for (let i = 0; i < MAX_PENDING; i++) await start("crowd")
    // The crowding agent lost its own oldest state; the other agent's still finishes.
    expect((await fetch(await approve(crowdFirst))).status).toBe(400)
    const page = await fetch(await approve(calm))
    expect(page.status).toBe(200)
    await page.text()
    expect(keep(await server.post("/for_agent/calm/wait_service", { client_id_or_service_name: "shared", status: "healthy", timeout: 15 })).status).toBe(200)
  })

  it("sends the code only to the store's callback or a loopback URL", async () => {
    const refused = keep(await server.post("/for_store/authorize_service", { service_name: "moved", redirect_uri: "https://attacker.example/cb" }))
    expect(refused.status).toBe(400)
    expect(refused.body.error.details.fields[0].field).toBe("redirect_uri")
    expect(refused.body.message).toMatch(/loopback/)
    const loopback = keep(await server.post("/for_store/authorize_service", { service_name: "terminal", redirect_uri: "http://127.0.0.1:9/cb" }))
    expect(loopback.status).toBe(200)
    expect(new URL(loopback.body.authorization_url).searchParams.get("redirect_uri")).toBe("http://127.0.0.1:9/cb")
  })

  it("sends the OAuth requests through the outbound policy: a challenge pointing at a metadata address is refused", { timeout: 30_000 }, async () => {
    // A hostile upstream: its resource metadata sends the store's discovery to the cloud metadata address.
    const hostile = createServer((req, res) => {
      const origin = `http://${req.headers.host}`
      if (req.url === "/resource") {
        res.setHeader("content-type", "application/json")
        return void res.end(JSON.stringify({ resource: `${origin}/mcp`, authorization_servers: ["http://169.254.169.254/latest"] }))
      }
      res.writeHead(401, { "www-authenticate": `Bearer resource_metadata="${origin}/resource"` }).end()
    })
    await new Promise<void>((resolve) => hostile.listen(0, "127.0.0.1", resolve))
    try {
      const url = `http://127.0.0.1:${(hostile.address() as AddressInfo).port}/mcp`
      keep(await server.post("/for_store/add_service", { name: "hostile", url }))
      expect((await waitFor(server, "hostile", "unreachable")).status).toBe(200)
      const refused = keep(await server.post("/for_store/authorize_service", { service_name: "hostile" }))
      expect(refused.status).toBe(502)
      expect(refused.body.message).toMatch(/upstream refused: 169\.254\.169\.254/)
    } finally {
      keep(await server.del("/for_store/delete_service/hostile"))
      hostile.closeAllConnections()
      await new Promise<void>((resolve) => hostile.close(() => resolve()))
    }
  })

  it("never shows a token in an answer, a log line, a record or the services file", async () => {
    keep(await server.get("/for_store/get_service_info?name=secure"))
    keep(await server.get("/for_store/tool_records"))
    keep(await server.get("/for_store/show_mcpconfig"))
    const files = readdirSync(dir)
      .map((f) => join(dir, f))
      .filter((f) => statSync(f).isFile())
      .map((f) => readFileSync(f, "utf8"))
    const haystacks = [...answers, ...logs.lines, ...files]
    expect(fixture.issued.length).toBeGreaterThan(2)
    for (const token of fixture.issued) {
      expect(haystacks.some((h) => h.includes(token))).toBe(false)
    }
    // Deleting the service removes its tokens from the token file.
    const vault = readFileSync(join(dir, "mcp.json.oauth"), "utf8")
    keep(await server.del("/for_store/delete_service/secure"))
    await eventually(() => readFileSync(join(dir, "mcp.json.oauth"), "utf8") !== vault, 5_000)
    expect(readFileSync(join(dir, "mcp.json.oauth"), "utf8")).not.toBe(vault)
  })

  it("finishes an authorization begun before a restart (the PKCE verifier is kept encrypted)", { timeout: 60_000 }, async () => {
    keep(await server.post("/for_store/add_service", { name: "patient", url: fixture.url }))
    expect((await waitFor(server, "patient", "unreachable")).status).toBe(200)
    const started = keep(await server.post("/for_store/authorize_service", { service_name: "patient" }))
    const back = await approve(started.body.authorization_url as string)
    const state = back.searchParams.get("state") as string
    await server.close()
    // Neither the state nor anything else of the authorization is readable in the folder.
    for (const f of readdirSync(dir)) expect(readFileSync(join(dir, f), "utf8")).not.toContain(state)
    server = await startTestServer({ dir })
    expect((await waitFor(server, "patient", "unreachable")).status).toBe(200)
    // The restarted store listens on another port here (port 0): the same callback, on it.
    const callback = new URL(`${back.pathname}${back.search}`, server.url)
    const page = await fetch(callback, { redirect: "manual" })
    expect(page.status).toBe(200)
    await page.text()
    expect((await waitFor(server, "patient", "healthy")).status).toBe(200)
    // Still single use.
    expect((await fetch(callback)).status).toBe(400)
  })

  // On the store above (started before the variable was set: it is read when the URL is used).
  it("with a variable in its URL: is authorized at its URL as expanded, before it ever connected here (as on a replica that does not run it)", async () => {
    const VAR = "MCPSTORE_TEST_OAUTH_UPSTREAM_HOST"
    process.env[VAR] = new URL(fixture.url).host
    try {
      const added = keep(await server.post("/for_store/add_service", { name: "varurl", url: `http://\${${VAR}}/mcp`, disabled: true }))
      expect(added.status, added.text).toBe(200)
      const started = keep(await server.post("/for_store/authorize_service", { service_name: "varurl" }))
      expect(started.status, started.text).toBe(200)
      expect(new URL(started.body.authorization_url as string).host).toBe(new URL(fixture.url).host)
    } finally {
      delete process.env[VAR]
    }
  })
})
