/**
 * Upstream OAuth end to end, as a user drives it: an OAuth-protected MCP server on 127.0.0.1 (the
 * SDK's mcpAuthRouter and requireBearerAuth), a store that sees `needs_authorization`, the
 * authorization URL followed to the store's callback, a refresh when the short-lived token
 * expires, revocation back to `needs_authorization` with an alert, paste-the-code, a restart that
 * reuses the encrypted token, client credentials, and no token anywhere it must not be.
 */
import { readdirSync, readFileSync, statSync } from "node:fs"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { runAuth } from "../../src/config/auth-command.js"
import { captureLogs, type CapturedLogs } from "../../src/runtime/log.js"
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
  return (list.body.services as Array<{ name: string; status: string; auth?: { state: string; authorization_url?: string } }>).find((s) => s.name === name)
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
    expect(page.headers.get("content-security-policy")).toBe("default-src 'none'")
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
    server = await startTestServer({ dir })
    expect((await waitFor(server, "secure", "healthy")).status).toBe(200)
    expect(fixture.counts.authorize).toBe(authorizations)
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
})
