/**
 * An upstream whose authorization server is a real OpenID provider (`oidc-provider`, the fixture
 * test/fixtures/oidc-issuer.ts with `codeFlow`): OpenID discovery, dynamic registration, the code
 * flow with PKCE and a resource indicator, JWT access tokens for the upstream, and RFC 9207, which
 * the provider always does: its metadata advertises it and the browser comes back with `iss`. The
 * store passes `iss` on from its callback and takes it pasted; without it a pasted code is a 400
 * naming `iss`. The provider lists `offline_access`: the store asks for it (with `prompt=consent`,
 * which the provider needs for it) and gets a refresh token, which it uses.
 */
import { createServer, type Server } from "node:http"
import type { AddressInfo } from "node:net"
import express from "express"
import { createRemoteJWKSet, jwtVerify } from "jose"
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { createFixtureServer } from "../fixtures/fixture-server.js"
import { startOidcIssuer, type OidcIssuer } from "../fixtures/oidc-issuer.js"
import { eventually, freshDir, startTestServer, type TestServer } from "../support/index.js"

const SCOPE = "mcp-store:tools"

/** A Streamable HTTP MCP server that takes the provider's JWTs for its own URL (audience), 401 with a challenge otherwise. */
const startProtected = async (issuer: string) => {
  const server: Server = createServer()
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  const url = `${base}/mcp`
  const metadataUrl = `${base}/.well-known/oauth-protected-resource/mcp`
  const jwks = createRemoteJWKSet(new URL(`${issuer}/jwks`))
  /** Every access token taken (a new one after each refresh). */
  const tokens = new Set<string>()
  const app = express()
  app.get("/.well-known/oauth-protected-resource/mcp", (_req: any, res: any) => void res.json({ resource: url, authorization_servers: [issuer], scopes_supported: [SCOPE] }))
  app.all("/mcp", express.json(), async (req: any, res: any) => {
    const token = /^Bearer (.+)$/.exec(req.headers.authorization ?? "")?.[1]
    const valid = token !== undefined && (await jwtVerify(token, jwks, { issuer, audience: url }).then(() => true, () => false))
    if (!valid) return void res.status(401).set("www-authenticate", `Bearer resource_metadata="${metadataUrl}"`).json({ error: "invalid_token" })
    tokens.add(token)
    const transport = new StreamableHTTPServerTransport({ enableJsonResponse: true })
    const mcp = createFixtureServer({ name: "oidc-protected" })
    res.on("close", () => {
      void transport.close()
      void mcp.close()
    })
    await mcp.connect(transport)
    await transport.handleRequest(req, res, req.body)
  })
  server.on("request", app)
  return {
    url,
    tokens,
    stop: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      })
  }
}

/** A browser: follows the provider's redirects with its cookies, up to the address it sends the user back to (not followed). */
const browse = async (authorizationUrl: string, backTo: string): Promise<URL> => {
  const cookies = new Map<string, string>()
  let next = new URL(authorizationUrl)
  for (let hop = 0; hop < 10; hop++) {
    if (next.href.startsWith(backTo)) return next
    const answer = await fetch(next, { redirect: "manual", headers: { cookie: [...cookies].map(([k, v]) => `${k}=${v}`).join("; ") } })
    for (const c of answer.headers.getSetCookie()) {
      const [pair] = c.split(";")
      const at = (pair as string).indexOf("=")
      cookies.set((pair as string).slice(0, at), (pair as string).slice(at + 1))
    }
    const location = answer.headers.get("location")
    if (location === null) throw new Error(`the provider answered ${answer.status} at ${next.pathname}: ${(await answer.text()).slice(0, 300)}`)
    await answer.body?.cancel()
    next = new URL(location, next)
  }
  throw new Error("too many redirects")
}

let issuer: OidcIssuer
let upstream: Awaited<ReturnType<typeof startProtected>>
let server: TestServer

beforeAll(async () => {
  issuer = await startOidcIssuer([], 2, { codeFlow: true })
  upstream = await startProtected(issuer.issuer)
  server = await startTestServer({ dir: freshDir() })
})
afterAll(async () => {
  await server?.cleanup()
  await upstream?.stop()
  await issuer?.close()
})

const waitFor = async (name: string, status: string) => (await server.post("/for_store/wait_service", { client_id_or_service_name: name, status, timeout: 15 })).status

describe("an upstream authorized by an OpenID provider", () => {
  it("is authorized through the callback with the provider's iss, asks offline_access, and refreshes", { timeout: 60_000 }, async () => {
    expect((await server.post("/for_store/add_service", { name: "oidc", url: upstream.url })).status).toBe(200)
    expect(await waitFor("oidc", "unreachable")).toBe(200)
    const started = await server.post("/for_store/authorize_service", { service_name: "oidc" })
    expect(started.status, JSON.stringify(started.body)).toBe(200)
    const asked = new URL(started.body.authorization_url as string)
    expect(asked.searchParams.get("scope")?.split(" ").sort()).toEqual([SCOPE, "offline_access"].sort())
    expect(asked.searchParams.get("prompt")).toBe("consent")
    const back = await browse(asked.href, `${server.url}/oauth/callback`)
    expect(back.searchParams.get("iss")).toBe(issuer.issuer)
    const page = await fetch(back, { redirect: "manual" })
    expect(page.status, await page.text()).toBe(200)
    expect(await waitFor("oidc", "healthy")).toBe(200)
    // Its 2 s access token is refreshed with the refresh token offline_access brought: new tokens, taken, no user asked.
    expect(await eventually(() => upstream.tokens.size >= 3, 15_000)).toBe(true)
    expect((await server.post("/for_store/call_tool", { tool_name: "oidc__echo", arguments: { text: "hi" } })).status).toBe(200)
    const status = await server.get("/for_store/service_status/oidc")
    expect(status.body.auth?.state).toBe("authorized")
  })

  it("takes a pasted code with the provider's iss, and names iss when it is missing", { timeout: 30_000 }, async () => {
    const started = await server.post("/for_store/authorize_service", { service_name: "oidc", redirect_uri: "http://127.0.0.1:9/callback" })
    expect(started.status, JSON.stringify(started.body)).toBe(200)
    const back = await browse(started.body.authorization_url as string, "http://127.0.0.1:9/callback")
    const pasted = { service_name: "oidc", code: back.searchParams.get("code"), state: back.searchParams.get("state") }
    const missing = await server.post("/for_store/authorize_service", pasted)
    expect(missing.status).toBe(400)
    expect(missing.body.error.details.fields[0].field).toBe("iss")
    const done = await server.post("/for_store/authorize_service", { ...pasted, iss: back.searchParams.get("iss") })
    expect(done.status, JSON.stringify(done.body)).toBe(200)
    expect(await waitFor("oidc", "healthy")).toBe(200)
  })
})
