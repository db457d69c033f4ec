/**
 * OAuth for upstream MCP servers that require it (the MCP authorization spec), on the SDK's client
 * auth: `auth()` runs discovery (RFC 9728 resource metadata, authorization server metadata), dynamic
 * registration, PKCE S256 and the `resource` parameter for the authorization code flow, and
 * `ClientCredentialsProvider` the machine flow; refreshes use the SDK's `refreshAuthorization`
 * directly, so that an `invalid_grant` (a user must authorize again) is told apart from any other
 * failure (shown in last_error, never turned into a silent new redirect).
 *
 * One `ServiceAuth` per service is the token source of its connections (src/mcp/oauth-client.ts): the
 * token is refreshed shortly before it expires and on a 401, one refresh at a time per service.
 * Tokens, registrations and discovery state live encrypted in the `TokenVault`, and so do the
 * PKCE verifier and `state` of each authorization under way (a restart does not lose them), bound
 * to the service, single use, expiring after 10 minutes, at most `MAX_PENDING` at once per scope. Every OAuth request
 * goes through the manager's `fetch` (bounded, timed, under the outbound policy). The service actor is told the
 * public side of it all (`AuthInfo`: never a token) for the views and events.
 */
import { randomBytes } from "node:crypto"
import { auth, refreshAuthorization, type OAuthClientProvider, type OAuthDiscoveryState } from "@modelcontextprotocol/sdk/client/auth.js"
import { ClientCredentialsProvider } from "@modelcontextprotocol/sdk/client/auth-extensions.js"
import { InvalidGrantError } from "@modelcontextprotocol/sdk/server/auth/errors.js"
import type { OAuthClientInformationMixed, OAuthClientMetadata, OAuthTokens } from "@modelcontextprotocol/sdk/shared/auth.js"
import { scopeLabel, type Scope } from "../domain/service-definition.js"
import type { AuthInfo, ServiceActorRef } from "../machines/service.js"
import { AuthorizationRequiredError, type BearerChallenge, type UpstreamAuth } from "../mcp/oauth-client.js"
import { Effect, Option, Schema } from "effect"
import { OAuthSettings } from "../domain/schemas.js"
import { resolveDefinition } from "../domain/service-definition.js"
import { UpstreamError, ValidationError, type ServiceNotFound } from "../domain/errors.js"
import type { ScopeContext } from "./host.js"
import { log } from "../logging/log.js"
import type { TokenStore, VaultEntry } from "../config/token-vault.js"

/** How long an authorization's `state` stays usable. */
export const STATE_TTL_MS = 10 * 60_000
/** Authorizations under way at once in one scope (its older ones are dropped first): one agent cannot crowd out another's. */
export const MAX_PENDING = 100
/** Authorizations under way at once in the whole store (the oldest dropped first): memory stays bounded however many agents there are. */
export const MAX_PENDING_TOTAL = 10_000
/** A token is refreshed when less than this much of its life is left (or half its life, if shorter). */
const REFRESH_MARGIN_MS = 60_000

/** A definition's `oauth` object (pre-registered client, machine credentials, scopes): src/domain/schemas.ts. */
export type OAuthConfig = OAuthSettings

const decodeOAuth = Schema.decodeUnknownOption(OAuthSettings)

/** A definition's `oauth`, as its schema checked it; undefined when absent or malformed (never thrown at a connect). */
export const oauthConfigOf = (value: unknown): OAuthConfig | undefined => (value === undefined ? undefined : Option.getOrUndefined(decodeOAuth(value)))

/** An authorization under way, found by its `state`. */
interface Pending {
  readonly service: string
  readonly scope: Scope
  readonly name: string
  verifier: string
  readonly redirectUri: string
  readonly expiresAt: number
}

/** Where the manager finds a service's actor, to tell it what happened. */
export type ActorLookup = (scope: Scope, name: string) => ServiceActorRef | undefined

export class OAuthManager {
  private readonly services = new Map<string, ServiceAuth>()
  private readonly pending = new Map<string, Pending>()
  /** The states of `pending` by scope label, oldest first (for the per-scope cap). */
  private readonly pendingByScope = new Map<string, Set<string>>()

  constructor(
    readonly vault: TokenStore,
    private readonly lookup: ActorLookup,
    /** The store's own callback URL (`<base>/oauth/callback`), once the server listens. */
    readonly callbackUrl: () => string | undefined,
    /** The fetch of every OAuth request (src/mcp/oauth-client.ts `oauthFetch`: outbound policy, bounded, timed). */
    readonly fetch: typeof globalThis.fetch
  ) {
    // Authorizations under way before a restart (kept encrypted in the vault), oldest first.
    for (const { state, ...p } of vault.pendingRecords()) {
      this.pending.set(state, p)
      const label = scopeLabel(p.scope)
      this.pendingByScope.set(label, (this.pendingByScope.get(label) ?? new Set<string>()).add(state))
    }
  }

  /** The token source of a remote service (created on first use; a new origin drops old tokens). */
  forService(scope: Scope, name: string, url: string, config: OAuthConfig | undefined): ServiceAuth {
    const key = `${scopeLabel(scope)}/${name}`
    let service = this.services.get(key)
    const origin = new URL(url).origin
    if (service === undefined || service.url !== url || JSON.stringify(service.config) !== JSON.stringify(config)) {
      service = new ServiceAuth(this, scope, name, key, url, config)
      this.services.set(key, service)
    }
    const stored = this.vault.find(key)
    if (stored !== undefined && stored.origin !== origin) {
      service.drop()
      void this.vault.remove(key)
      log.info(`OAuth tokens of ${key} dropped: its URL moved to another origin`, { event: "oauth_tokens_dropped", service: key })
    }
    return service
  }

  /** The token source a connect of the service made, if any. */
  connected(scope: Scope, name: string): ServiceAuth | undefined {
    return this.services.get(`${scopeLabel(scope)}/${name}`)
  }

  /** Forgets a deleted service: its tokens, registration and authorizations under way. */
  async forget(scope: Scope, name: string): Promise<void> {
    const key = `${scopeLabel(scope)}/${name}`
    this.services.get(key)?.drop()
    this.services.delete(key)
    for (const [state, p] of this.pending) if (p.service === key) this.dropState(state)
    await this.vault.remove(key)
  }

  /** Tells the service's actor something (the public side only). */
  tell(service: ServiceAuth, event: { type: "AUTH_CHANGED"; auth: AuthInfo | undefined } | { type: "AUTH_REQUIRED"; reason: string } | { type: "AUTHORIZED" }): void {
    this.lookup(service.scope, service.name)?.send(event)
  }

  /**
   * A new `state` bound to a service, single use. Past `MAX_PENDING` in the service's scope, that
   * scope's oldest is dropped (never another scope's); past `MAX_PENDING_TOTAL`, the store's oldest.
   */
  newState(p: Omit<Pending, "expiresAt">): string {
    const now = Date.now()
    // Insertion order is age order (one lifetime for all): the expired are the first ones.
    for (const [state, old] of this.pending) {
      if (old.expiresAt > now) break
      this.dropState(state)
    }
    const label = scopeLabel(p.scope)
    const mine = this.pendingByScope.get(label) ?? new Set<string>()
    for (const state of mine) {
      if (mine.size < MAX_PENDING) break
      this.dropState(state)
    }
    while (this.pending.size >= MAX_PENDING_TOTAL) this.dropState(this.pending.keys().next().value as string)
    const state = randomBytes(24).toString("base64url")
    // Set again: dropping its last state above may have removed it.
    this.pendingByScope.set(label, mine.add(state))
    this.pending.set(state, { ...p, expiresAt: now + STATE_TTL_MS })
    return state
  }

  /** Forgets an authorization under way (taken, expired, crowded out, its service deleted). */
  private dropState(state: string): void {
    const p = this.pending.get(state)
    if (p === undefined) return
    this.pending.delete(state)
    void this.vault.removePending(state, false)
    const label = scopeLabel(p.scope)
    const mine = this.pendingByScope.get(label)
    mine?.delete(state)
    if (mine?.size === 0) this.pendingByScope.delete(label)
  }

  /** The PKCE verifier of an authorization under way: kept with its state, and in the vault (encrypted) for a restart. */
  attachVerifier(state: string, verifier: string): Promise<void> {
    const p = this.pending.get(state)
    if (p === undefined) return Promise.resolve()
    p.verifier = verifier
    return this.vault.putPending({ state, ...p })
  }

  /**
   * Finishes an authorization with the code and state the authorization server sent back. The
   * state is used once; when `expected` is given (a pasted code), it must belong to that service.
   * Resolves with the service's key; rejects with a message safe to show (no input echoed).
   */
  async finish(code: string, state: string, expected?: { readonly scope: Scope; readonly name: string }): Promise<string> {
    const pending = this.takeState(state)
    if (pending === undefined) throw new OAuthFlowError("unknown or expired state: start the authorization again")
    if (expected !== undefined && (scopeLabel(expected.scope) !== scopeLabel(pending.scope) || expected.name !== pending.name)) {
      throw new OAuthFlowError("this state belongs to another service: start the authorization again")
    }
    const service = this.services.get(pending.service)
    if (service === undefined) throw new OAuthFlowError("the service is gone: start the authorization again")
    try {
      await service.complete(code, pending)
    } catch (e) {
      log.warn(`OAuth authorization of ${pending.service} failed: ${e instanceof Error ? e.message : String(e)}`, { event: "oauth_failed", service: pending.service })
      throw new OAuthFlowError(`the authorization server refused the code: ${e instanceof Error ? e.message.slice(0, 300) : "unknown error"}`)
    }
    return pending.service
  }

  /** Takes an authorization under way by its `state` (once), if it is still valid. */
  takeState(state: string): Pending | undefined {
    const p = this.pending.get(state)
    if (p === undefined) return undefined
    this.dropState(state)
    // Single use across a restart too.
    void this.vault.removePending(state, true)
    return p.expiresAt > Date.now() ? p : undefined
  }

  /** The service of a key, when known. */
  service(key: string): ServiceAuth | undefined {
    return this.services.get(key)
  }

  /** How many authorizations are under way (for tests of the bound). */
  get pendingCount(): number {
    return this.pending.size
  }
}

/** A failed step of an authorization, with a message safe to show to the user. */
export class OAuthFlowError extends Error {
  readonly _tag = "OAuthFlowError"
}

/** A token as kept, with when it was obtained. */
type Held = OAuthTokens & { readonly obtained_at: number }

/** One service's OAuth: its token source and its flows. */
export class ServiceAuth implements UpstreamAuth {
  private tokens: Held | undefined
  private refreshing: Promise<void> | undefined
  /** The last bearer challenge (where the resource metadata is, the scopes asked for). */
  private challenge: BearerChallenge | undefined
  private info: AuthInfo | undefined
  /** The issuer and scope the stored entry is under. */
  private entry: VaultEntry | undefined

  constructor(
    private readonly manager: OAuthManager,
    readonly scope: Scope,
    readonly name: string,
    readonly key: string,
    readonly url: string,
    readonly config: OAuthConfig | undefined
  ) {
    this.entry = manager.vault.find(key)
    this.tokens = this.entry?.tokens
    if (this.tokens !== undefined) this.publish({ required: true, state: "authorized", ...this.expiry() })
  }

  /**
   * The authorization server a pre-registered client's credentials may be sent to: the
   * definition's `oauth.issuer`, else the first one found for the service (kept in the vault). The
   * SDK refuses to present them to another one (a hostile upstream's metadata naming its own).
   */
  private get expectedIssuer(): string | undefined {
    return this.config?.issuer ?? (this.entry?.issuer || undefined)
  }

  private get scopes(): string | undefined {
    return this.config?.scopes?.join(" ") || this.challenge?.scope || undefined
  }

  async accessToken(): Promise<string | undefined> {
    const held = this.tokens
    if (held === undefined) return undefined
    if (held.expires_in !== undefined) {
      const lifetime = held.expires_in * 1000
      const left = held.obtained_at + lifetime - Date.now()
      if (left < Math.min(REFRESH_MARGIN_MS, lifetime / 2)) {
        await this.renew().catch(() => undefined)
      }
    }
    return this.tokens?.access_token
  }

  async unauthorized(challenge: BearerChallenge, rejected: string | undefined, last: boolean): Promise<void> {
    this.challenge = challenge
    if (!last) {
      // A concurrent request already replaced the refused token: retry with the new one.
      if (this.tokens !== undefined && this.tokens.access_token !== rejected) return
      if (this.tokens?.refresh_token !== undefined || this.config?.grant_type === "client_credentials") return this.renew()
    }
    throw this.needsAuthorization(last ? "the upstream refused a fresh access token" : "the upstream requires an OAuth authorization")
  }

  /**
   * Refreshes (or obtains with client credentials) once at a time; concurrent callers share it.
   * Across the replicas of a cluster, under the token store's lock: tokens another replica got
   * while this one waited are taken as they are.
   */
  private renew(): Promise<void> {
    const held = this.tokens?.access_token
    this.refreshing ??= this.manager.vault
      .exclusive(this.key, async (latest) => {
        if (latest?.tokens !== undefined && latest.tokens.access_token !== held) {
          this.entry = latest
          this.tokens = latest.tokens
          this.publish({ required: true, state: "authorized", scopes: this.scopeList(), ...this.expiry() })
          return
        }
        return this.doRenew()
      })
      .finally(() => (this.refreshing = undefined))
    return this.refreshing
  }

  private async doRenew(): Promise<void> {
    if (this.config?.grant_type === "client_credentials") return this.clientCredentials()
    const held = this.tokens
    const entry = this.entry
    if (held?.refresh_token === undefined || entry?.client === undefined || entry.discovery === undefined) {
      throw this.needsAuthorization("no refresh token: the upstream requires an OAuth authorization")
    }
    try {
      const { authorizationServerMetadata: metadata, resourceMetadata } = entry.discovery
      const fresh = await refreshAuthorization(entry.discovery.authorizationServerUrl, {
        fetchFn: this.manager.fetch,
        ...(metadata !== undefined ? { metadata } : {}),
        clientInformation: entry.client,
        refreshToken: held.refresh_token,
        ...(resourceMetadata?.resource !== undefined ? { resource: resourceMetadata.resource } : {})
      })
      // A server may keep the refresh token the same and leave it out of the answer.
      await this.keep({ ...fresh, refresh_token: fresh.refresh_token ?? held.refresh_token })
      log.info(`OAuth token of ${this.key} refreshed`, { event: "oauth_refreshed", service: this.key })
    } catch (e) {
      if (e instanceof InvalidGrantError) {
        this.tokens = undefined
        await this.manager.vault.put({ ...entry, tokens: undefined })
        throw this.needsAuthorization("the authorization server refused the refresh token (invalid_grant): authorize the store again")
      }
      const message = `OAuth token refresh failed: ${e instanceof Error ? e.message : String(e)}`
      this.publish({ required: true, state: "refresh_failed", scopes: this.scopeList() })
      log.warn(`${this.key}: ${message}`, { event: "oauth_refresh_failed", service: this.key })
      throw new Error(message)
    }
  }

  /** Machine credentials: a new token from the token endpoint (the SDK's ClientCredentialsProvider). */
  private async clientCredentials(): Promise<void> {
    const config = this.config
    if (config?.client_id === undefined || config.client_secret === undefined) {
      throw this.needsAuthorization('"oauth" with "grant_type": "client_credentials" needs "client_id" and "client_secret"')
    }
    const issuer = this.expectedIssuer
    const provider = new ClientCredentialsProvider({
      clientId: config.client_id,
      clientSecret: config.client_secret,
      clientName: "mcp-store",
      ...(issuer !== undefined ? { expectedIssuer: issuer } : {}),
      ...(this.scopes !== undefined ? { scope: this.scopes } : {})
    })
    const discovery = new DiscoveryCache()
    const withDiscovery = Object.assign(provider, { saveDiscoveryState: discovery.save, discoveryState: discovery.load })
    try {
      await auth(withDiscovery, { serverUrl: this.url, ...this.authOptions() })
    } catch (e) {
      const message = `OAuth client credentials refused: ${e instanceof Error ? e.message : String(e)}`
      this.publish({ required: true, state: "refresh_failed", scopes: this.scopeList() })
      throw new Error(message)
    }
    this.entry = this.entryWith(discovery.state)
    await this.keep(provider.tokens() as OAuthTokens)
  }

  /** Starts the authorization code flow: the URL a user opens, or already authorized. */
  async begin(redirectUri: string): Promise<{ readonly authorization_url: string } | { readonly authorized: true }> {
    if (this.config?.grant_type === "client_credentials") {
      await this.renew()
      this.manager.tell(this, { type: "AUTHORIZED" })
      return { authorized: true }
    }
    let url: URL | undefined
    const provider = this.provider(redirectUri, {
      state: () => this.manager.newState({ service: this.key, scope: this.scope, name: this.name, verifier: "", redirectUri }),
      redirect: (u) => void (url = u)
    })
    await auth(provider, { serverUrl: this.url, ...this.authOptions() })
    if (url === undefined) throw new Error("the authorization server gave no authorization URL")
    const authorizationUrl = url.href
    this.publish({ required: true, state: "authorizing", authorization_url: authorizationUrl, scopes: this.scopeList() })
    log.info(`OAuth authorization of ${this.key} started`, { event: "oauth_authorizing", service: this.key })
    return { authorization_url: authorizationUrl }
  }

  /** Finishes the flow with the code the authorization server sent back (callback or pasted). */
  async complete(code: string, pending: { readonly verifier: string; readonly redirectUri: string }): Promise<void> {
    const provider = this.provider(pending.redirectUri, { verifier: pending.verifier })
    await auth(provider, { serverUrl: this.url, authorizationCode: code, ...this.authOptions() })
    log.info(`OAuth authorization of ${this.key} done`, { event: "oauth_authorized", service: this.key })
    this.manager.tell(this, { type: "AUTHORIZED" })
  }

  /** Forgets the tokens (deleted service, new origin). */
  drop(): void {
    this.tokens = undefined
    this.entry = undefined
    this.publish(undefined)
  }

  private authOptions() {
    const url = this.challenge?.resourceMetadataUrl
    let resourceMetadataUrl: URL | undefined
    try {
      resourceMetadataUrl = url !== undefined ? new URL(url) : undefined
    } catch {
      resourceMetadataUrl = undefined
    }
    return {
      fetchFn: this.manager.fetch,
      ...(resourceMetadataUrl !== undefined ? { resourceMetadataUrl } : {}),
      ...(this.scopes !== undefined ? { scope: this.scopes } : {})
    }
  }

  /** The SDK's provider for the code flow: the vault for registrations and tokens. */
  private provider(redirectUri: string, flow: { state?: () => string; redirect?: (url: URL) => void; verifier?: string }): OAuthClientProvider {
    const config = this.config
    const metadata: OAuthClientMetadata = {
      client_name: "mcp-store",
      redirect_uris: [redirectUri],
      grant_types: ["authorization_code", "refresh_token"],
      response_types: ["code"],
      token_endpoint_auth_method: config?.client_secret !== undefined ? "client_secret_basic" : "none",
      ...(this.scopes !== undefined ? { scope: this.scopes } : {})
    }
    const issuer = this.expectedIssuer
    const preRegistered: OAuthClientInformationMixed | undefined =
      config?.client_id !== undefined
        ? { client_id: config.client_id, ...(config.client_secret !== undefined ? { client_secret: config.client_secret } : {}), ...(issuer !== undefined ? { issuer } : {}) }
        : undefined
    let state: string | undefined
    return {
      get redirectUrl() {
        return redirectUri
      },
      get clientMetadata() {
        return metadata
      },
      state: () => (state = flow.state?.() ?? ""),
      clientInformation: () => {
        if (preRegistered !== undefined) return preRegistered
        const client = this.entry?.client as { redirect_uris?: unknown } | undefined
        // A registration made for another redirect URI cannot be used with this one.
        return Array.isArray(client?.redirect_uris) && client.redirect_uris.includes(redirectUri) ? (this.entry?.client as OAuthClientInformationMixed) : undefined
      },
      saveClientInformation: async (client) => {
        this.entry = { ...(this.entry ?? this.entryWith(undefined)), client }
        await this.manager.vault.put(this.entry)
      },
      tokens: () => undefined,
      saveTokens: (tokens) => this.keep(tokens),
      redirectToAuthorization: (url) => flow.redirect?.(url),
      saveCodeVerifier: (verifier) =>
        // The verifier joins the pending state it belongs to (single use; encrypted in the vault).
        state !== undefined ? this.manager.attachVerifier(state, verifier) : undefined,
      codeVerifier: () => flow.verifier ?? "",
      saveDiscoveryState: async (discovery) => {
        this.entry = { ...(this.entry ?? this.entryWith(discovery)), discovery, issuer: discovery.authorizationServerUrl }
        await this.manager.vault.put(this.entry)
      },
      discoveryState: () => this.entry?.discovery
    }
  }

  private entryWith(discovery: OAuthDiscoveryState | undefined): VaultEntry {
    return {
      issuer: discovery?.authorizationServerUrl ?? this.entry?.issuer ?? "",
      scope: this.scopes ?? "",
      service: this.key,
      origin: new URL(this.url).origin,
      ...(this.entry?.client !== undefined ? { client: this.entry.client } : {}),
      discovery: discovery ?? this.entry?.discovery
    }
  }

  /** Keeps new tokens (memory and vault) and shows the service authorized. */
  private async keep(tokens: OAuthTokens): Promise<void> {
    this.tokens = { ...tokens, obtained_at: Date.now() }
    this.entry = { ...(this.entry ?? this.entryWith(undefined)), tokens: this.tokens }
    await this.manager.vault.put(this.entry)
    this.publish({ required: true, state: "authorized", scopes: this.scopeList(), ...this.expiry() })
  }

  /** Marks the service as waiting for a user, tells its actor, and returns the error to throw. */
  private needsAuthorization(reason: string): AuthorizationRequiredError {
    if (this.info?.state !== "authorizing") this.publish({ required: true, state: "needs_authorization", scopes: this.scopeList() })
    this.manager.tell(this, { type: "AUTH_REQUIRED", reason })
    return new AuthorizationRequiredError(reason)
  }

  private publish(info: AuthInfo | undefined): void {
    this.info = info
    this.manager.tell(this, { type: "AUTH_CHANGED", auth: info })
  }

  private scopeList(): ReadonlyArray<string> | undefined {
    const scope = this.tokens?.scope ?? this.scopes
    return scope === undefined || scope === "" ? undefined : scope.split(" ")
  }

  private expiry(): { expires_at?: string } {
    const t = this.tokens
    return t?.expires_in === undefined ? {} : { expires_at: new Date(t.obtained_at + t.expires_in * 1000).toISOString() }
  }

  /** The public side, for tests and views. */
  get view(): AuthInfo | undefined {
    return this.info
  }
}

/** The discovery state of one client-credentials run (kept in the vault by the caller). */
class DiscoveryCache {
  state: OAuthDiscoveryState | undefined
  readonly save = (state: OAuthDiscoveryState): void => {
    this.state = state
  }
  readonly load = (): OAuthDiscoveryState | undefined => this.state
}

/**
 * Why a `redirect_uri` is refused, or undefined. The authorization server sends the user's code
 * there: only the store's own callback, or a loopback URL (a program on the user's own machine,
 * RFC 8252), may receive it; any other site would get a code meant for the store.
 */
export const redirectProblem = (redirect: string, callback: string | undefined): string | undefined => {
  const allowed = `must be the store's own callback${callback !== undefined ? ` (${callback})` : ""} or a loopback http(s) URL (127.0.0.1, [::1] or localhost): the authorization server sends the code there, and no other site may receive it`
  if (!URL.canParse(redirect)) return allowed
  const url = new URL(redirect)
  if (url.protocol !== "http:" && url.protocol !== "https:") return allowed
  if (url.username !== "" || url.password !== "" || url.hash !== "") return `${allowed} (without credentials or a fragment)`
  if (callback !== undefined && URL.canParse(callback) && new URL(callback).href === url.href) return undefined
  const host = url.hostname.replace(/^\[|\]$/g, "").toLowerCase()
  const loopback = host === "localhost" || host === "::1" || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host)
  return loopback ? undefined : allowed
}

/** What authorize_service is given. */
export interface AuthorizeInput {
  readonly service_name: string
  readonly redirect_uri?: string | undefined
  readonly code?: string | undefined
  readonly state?: string | undefined
}

/**
 * authorize_service: with `code` and `state`, finishes the service's authorization (paste-the-code);
 * otherwise starts it and answers the URL to open (or `authorized` at once for machine credentials).
 */
export const authorizeUpstream = (
  ctx: ScopeContext,
  oauth: OAuthManager,
  input: AuthorizeInput
): Effect.Effect<{ readonly service_name: string; readonly state: "authorizing" | "authorized"; readonly authorization_url?: string }, ServiceNotFound | ValidationError | UpstreamError> =>
  Effect.gen(function* () {
    const actor = yield* ctx.service(input.service_name)
    const { name, definition } = actor.getSnapshot().context
    const resolved = yield* Effect.try({
      try: () => resolveDefinition(definition),
      catch: () => ValidationError.of([{ field: "service_name", problem: "the service's definition is not usable: fix it first" }])
    })
    if (resolved.kind !== "remote") {
      return yield* Effect.fail(ValidationError.of([{ field: "service_name", problem: "a local (stdio) service has no OAuth authorization" }]))
    }
    if ((input.code === undefined) !== (input.state === undefined)) {
      return yield* Effect.fail(ValidationError.of([{ field: input.code === undefined ? "code" : "state", problem: "give both code and state (paste-the-code), or neither" }]))
    }
    // The token source its last connect made (with its references expanded), else one from the definition as written.
    const service = oauth.connected(ctx.scope, name) ?? oauth.forService(ctx.scope, name, resolved.url, oauthConfigOf((definition as Record<string, unknown>)["oauth"]))
    if (input.code !== undefined && input.state !== undefined) {
      const { code, state } = input
      yield* Effect.tryPromise({
        try: () => oauth.finish(code, state, { scope: ctx.scope, name }),
        catch: (e) => ValidationError.of([{ field: "state", problem: e instanceof OAuthFlowError ? e.message : "the authorization could not be finished" }])
      })
      return { service_name: name, state: "authorized" as const }
    }
    const callback = oauth.callbackUrl()
    const redirect = input.redirect_uri ?? callback
    const problem = redirect === undefined ? "the store has no callback URL yet: give one" : redirectProblem(redirect, callback)
    if (redirect === undefined || problem !== undefined) return yield* Effect.fail(ValidationError.of([{ field: "redirect_uri", problem: problem as string }]))
    const started = yield* Effect.tryPromise({
      try: () => service.begin(redirect),
      catch: (e) =>
        new UpstreamError({
          message: `the OAuth authorization of '${name}' could not start: ${e instanceof Error ? e.message.slice(0, 500) : "unknown error"}`,
          outcome: "transport_error",
          serviceName: name,
          code: undefined
        })
    })
    return "authorization_url" in started
      ? { service_name: name, state: "authorizing" as const, authorization_url: started.authorization_url }
      : { service_name: name, state: "authorized" as const }
  })
