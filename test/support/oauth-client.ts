/**
 * An OAuth client's side for the tests of the built-in authorization server: its site on loopback
 * (the client metadata documents it serves, and its callback, which records what it receives) and
 * SDK v2's `OAuthClientProvider` kept in memory, with a URL client id given as known client
 * information (the SDK only makes https ones itself); and a browser of a given user at the OAuth
 * fixture's authorization page (test/fixtures/oauth-server.ts), for the upstream OAuth tests.
 */
import { createServer, type Server } from "node:http"
import type { AddressInfo } from "node:net"
import type { OAuthClientProvider } from "@modelcontextprotocol/client"

/** The client's site: `docs` by path, and the callback's requests in `callbacks`. */
export const startClientSite = async () => {
  const docs = new Map<string, unknown>()
  const callbacks: URL[] = []
  let base = ""
  const server: Server = createServer((req, res) => {
    const url = new URL(req.url ?? "/", base)
    if (url.pathname === "/callback") {
      callbacks.push(url)
      res.writeHead(200, { "content-type": "text/plain" })
      return res.end("back at the client")
    }
    const doc = docs.get(url.pathname)
    if (doc === undefined) return res.writeHead(404).end()
    res.writeHead(200, { "content-type": "application/json" })
    res.end(JSON.stringify(doc))
  })
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r))
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  return { base, docs, callbacks, close: () => new Promise<void>((r) => server.close(() => r())) }
}

/** SDK v2's client side of the flow, in memory; `lastUrl` is where it would send the browser. */
export class MemoryOAuthProvider implements OAuthClientProvider {
  saved: { access_token: string; refresh_token?: string } | undefined
  verifier = ""
  lastUrl: URL | undefined
  discovery: unknown
  info: { client_id: string; issuer?: string } | undefined
  constructor(
    readonly clientId: string,
    readonly callback: string,
    readonly resource: string
  ) {}
  get redirectUrl() {
    return this.callback
  }
  get clientMetadata() {
    return { redirect_uris: [this.callback], client_name: "test client", token_endpoint_auth_method: "none" }
  }
  clientInformation() {
    return this.info ?? { client_id: this.clientId }
  }
  saveClientInformation(info: { client_id: string; issuer?: string }) {
    this.info = info
  }
  tokens() {
    return this.saved as never
  }
  saveTokens(tokens: never) {
    this.saved = tokens
  }
  redirectToAuthorization(url: URL) {
    this.lastUrl = url
  }
  saveCodeVerifier(v: string) {
    this.verifier = v
  }
  codeVerifier() {
    return this.verifier
  }
  saveDiscoveryState(state: unknown) {
    this.discovery = state
  }
  discoveryState() {
    return this.discovery as never
  }
  async validateResourceURL() {
    return new URL(this.resource)
  }
}

/**
 * Follows an authorization URL of the OAuth fixture as a browser of `user` would (its `login_hint`),
 * up to the redirect back to the store: the URL the browser is sent to.
 */
export const approveAsUser = async (authorizationUrl: string, user: string): Promise<URL> => {
  const url = new URL(authorizationUrl)
  url.searchParams.set("login_hint", user)
  const answer = await fetch(url, { redirect: "manual" })
  const location = answer.headers.get("location")
  if (answer.status !== 302 || location === null) throw new Error(`the authorization page answered ${answer.status}, not a redirect`)
  return new URL(location)
}

/**
 * The browser back at the store's callback (`back`, the authorization server's redirect, on `base`
 * when given: another replica): a principal's own authorization asks first, and is answered
 * `decision` with the page's form (code, state, iss); a service's own finishes on the GET. The last
 * page's status and text, and whether the question was asked.
 */
export const callbackInBrowser = async (back: URL, decision: "connect" | "cancel" = "connect", base = back.origin): Promise<{ status: number; text: string; asked: boolean }> => {
  const page = await fetch(`${base}${back.pathname}${back.search}`, { redirect: "manual" })
  const text = await page.text()
  const form = /<form method="post" action="callback">(.*?)<\/form>/s.exec(text)?.[1]
  if (form === undefined) return { status: page.status, text, asked: false }
  const fields = new URLSearchParams({ decision })
  for (const [, name, value] of form.matchAll(/<input type="hidden" name="([^"]+)" value="([^"]*)">/g)) fields.set(name!, value!.replace(/&#(\d+);/g, (_, c: string) => String.fromCharCode(Number(c))))
  const answer = await fetch(new URL("callback", `${base}${back.pathname}`), { method: "POST", headers: { "content-type": "application/x-www-form-urlencoded" }, body: fields.toString(), redirect: "manual" })
  return { status: answer.status, text: await answer.text(), asked: true }
}

