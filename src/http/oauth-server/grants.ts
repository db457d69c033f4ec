/**
 * The built-in OAuth 2.1 authorization server's logic, apart from HTTP (src/http/oauth-server/endpoints.ts
 * serves it): authorization requests checked against the client's metadata document (or its dynamic
 * registration), the consent the operator gives, one-time PKCE-bound codes, ES256 access tokens for
 * one of the store's MCP endpoints, rotated refresh tokens, revocation and client credentials.
 *
 * What it keeps goes through a `GrantState` (src/http/oauth-server/grant-state.ts): one store's
 * file and memory, or a cluster's Redis in replica mode. A state that cannot be reached (Redis away)
 * makes the endpoints answer 503, never hang.
 */
import { randomBytes, timingSafeEqual, createHash } from "node:crypto"
import { createLocalJWKSet, decodeProtectedHeader, errors, jwtVerify, SignJWT, type JWK, type JWTVerifyGetKey } from "jose"
import { freshSecret, sha256, type ApprovedClient, type RefreshRecord, type RegisteredClient } from "../../config/oauth-server-file.js"
import type { SigningKey } from "../../config/oauth-signing-key.js"
import { agentIdProblem } from "../../domain/service-definition.js"
import { globsProblem } from "../../domain/tool-filter.js"
import { log } from "../../logging/log.js"
import type { UpstreamPolicy } from "../../mcp/upstream-policy.js"
import { TOOLS_SCOPE } from "../oauth-resource/scopes.js"
import { CLOCK_TOLERANCE_SECONDS, type TrustedIssuer } from "../oauth-resource/token-verifier.js"
import { FileGrantState, GRANT_LIMITS, type CheckedRequest, type ConsentView, type GrantState, type PendingConsent } from "./grant-state.js"
import { ClientMetadataCache, ClientMetadataError, clientIdProblem, redirectUriProblem, type ClientMetadata } from "./client-metadata.js"

export const ACCESS_TOKEN_SECONDS = 600
const CODE_MS = 60_000
const CONSENT_MS = 10 * 60_000
const REFRESH_MS = 30 * 24 * 3600_000
const ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
/** How old a client assertion may be (its `iat`), so how long its replay record must last. */
const ASSERTION_MAX_AGE_SECONDS = 300
/** An assertion whose `exp` is further than this past its `iat` is refused: no client needs one so long-lived. */
const ASSERTION_MAX_LIFETIME_SECONDS = 24 * 3600
/** How long past a token's `exp` its revocation is kept: the protected resource accepts it that long (clock tolerance). */
const REVOKED_PAST_EXP_MS = CLOCK_TOLERANCE_SECONDS * 1000
/** How long a family's revocation is kept: past the expiry of the last access token it may have given. */
const FAMILY_REVOKED_MS = ACCESS_TOKEN_SECONDS * 1000 + REVOKED_PAST_EXP_MS
/** The scopes it grants: the store's scope of the MCP endpoints (src/http/oauth-resource/scopes.ts), and refresh tokens. */
const SCOPES = [TOOLS_SCOPE, "offline_access"] as const

/** An OAuth error answer (RFC 6749 5.2), by the status it is sent with. */
export interface OAuthErrorAnswer {
  readonly status: 400 | 401 | 404 | 503
  readonly error: string
  readonly description: string
}

/** What the authorization endpoint does with a request. */
export type AuthorizeOutcome =
  /** Nothing may be sent to the client (unknown client, bad redirect URI): a plain error page. */
  | { readonly kind: "page"; readonly status: 400 | 503; readonly message: string }
  /** Back to the client's redirect URI, with a code or an error. */
  | { readonly kind: "redirect"; readonly location: string }
  /** The operator's consent is needed: the page for this request. */
  | { readonly kind: "consent"; readonly consent: ConsentView }

export type { ConsentView } from "./grant-state.js"

/** The token endpoint's answer. */
export type TokenAnswer = { readonly status: 200; readonly body: Record<string, unknown> } | OAuthErrorAnswer

/** Where the server runs: the issuer (the store's public base URL, read when needed: the port is known once listening). */
export interface AuthorizationServerOptions {
  readonly servicesFile: string
  readonly issuer: () => string
  /** The signing key; in replica mode given later with the cluster's state (`attach`). */
  readonly key: SigningKey | undefined
  readonly policy: UpstreamPolicy
  readonly devLoopbackClients: boolean
  readonly dynamicRegistration: boolean
  /** Where its state is kept; default the services file's companion file and memory (`FileGrantState`). */
  readonly state?: GrantState
  readonly now?: () => number
}

const oauthError = (status: OAuthErrorAnswer["status"], error: string, description: string): OAuthErrorAnswer => ({ status, error, description })

const digestEqual = (a: string, b: string): boolean => {
  const x = createHash("sha256").update(a).digest()
  const y = createHash("sha256").update(b).digest()
  return timingSafeEqual(x, y)
}

/** The PKCE S256 challenge of a verifier. */
const s256 = (verifier: string): string => createHash("sha256").update(verifier, "ascii").digest("base64url")

/** The answer when the state cannot be reached (Redis away or too slow). */
const unavailable = (e: unknown): OAuthErrorAnswer => {
  log.warn(`the authorization server's state cannot be reached: ${e instanceof Error ? e.message : String(e)}`, { event: "oauth_server_unavailable" })
  return oauthError(503, "temporarily_unavailable", "the authorization server's state cannot be reached now; try again shortly")
}

const one = (v: unknown): string | undefined => (typeof v === "string" && v.length <= 4096 ? v : undefined)

/** The answer to a confidential client that did not authenticate. */
const mustAuthenticate = (): OAuthErrorAnswer => oauthError(401, "invalid_client", "the client is confidential: it must authenticate (its client secret or a private_key_jwt client_assertion)")

/** Who asks at the token or revocation endpoint: a client id, and whether the client proved it is that client. */
type Caller = { readonly clientId: string; readonly authenticated: boolean }

/** The built-in authorization server. */
export class AuthorizationServer {
  private readonly metadataDocs: ClientMetadataCache
  private readonly now: () => number
  private state: GrantState
  private key: SigningKey | undefined
  private keySet: JWTVerifyGetKey | undefined
  /** The public key set its tokens are verified with (the current key's, once there is one). */
  readonly keys: JWTVerifyGetKey = (header, token) => {
    if (this.keySet === undefined) return Promise.reject(new Error("the authorization server has no signing key yet"))
    return (this.keySet as (h: typeof header, t: typeof token) => ReturnType<JWTVerifyGetKey>)(header, token)
  }

  constructor(private readonly options: AuthorizationServerOptions) {
    this.now = options.now ?? Date.now
    this.state = options.state ?? new FileGrantState(options.servicesFile, this.now)
    this.metadataDocs = new ClientMetadataCache(options.policy, options.devLoopbackClients, this.now)
    this.key = options.key
    this.keySet = options.key === undefined ? undefined : createLocalJWKSet({ keys: [options.key.publicJwk] })
  }

  /**
   * Replica mode: the cluster's state and signing key, once the cluster is joined (the routes are
   * not served before). The state given before is let go.
   */
  async attach(state: GrantState, key: SigningKey): Promise<void> {
    const before = this.state
    this.state = state
    this.key = key
    this.keySet = createLocalJWKSet({ keys: [key.publicJwk] })
    await before.close()
  }

  /** Resolves once the changes under way are written (shutdown). */
  flush(): Promise<void> {
    return this.state.flush()
  }

  /** Flushes and lets go of the state (its timer and connection in replica mode). */
  close(): Promise<void> {
    return this.state.close()
  }

  /** The issuer (the store's public base URL). */
  get issuer(): string {
    return this.options.issuer()
  }

  /** The public keys, as served at /oauth/jwks. */
  get jwks(): { readonly keys: ReadonlyArray<unknown> } {
    return { keys: this.key === undefined ? [] : [this.key.publicJwk] }
  }

  /** RFC 8414 metadata, served at /.well-known/oauth-authorization-server. */
  metadata(): Record<string, unknown> {
    const base = this.issuer
    return {
      issuer: base,
      authorization_endpoint: `${base}/oauth/authorize`,
      token_endpoint: `${base}/oauth/token`,
      revocation_endpoint: `${base}/oauth/revoke`,
      jwks_uri: `${base}/oauth/jwks`,
      ...(this.options.dynamicRegistration ? { registration_endpoint: `${base}/oauth/register` } : {}),
      response_types_supported: ["code"],
      response_modes_supported: ["query"],
      grant_types_supported: ["authorization_code", "refresh_token", "client_credentials"],
      code_challenge_methods_supported: ["S256"],
      token_endpoint_auth_methods_supported: ["none", "private_key_jwt", "client_secret_basic", "client_secret_post"],
      token_endpoint_auth_signing_alg_values_supported: ["ES256", "RS256", "PS256", "EdDSA"],
      revocation_endpoint_auth_methods_supported: ["none", "private_key_jwt", "client_secret_basic", "client_secret_post"],
      scopes_supported: [...SCOPES],
      authorization_response_iss_parameter_supported: true,
      client_id_metadata_document_supported: true
    }
  }

  // ---- clients ---------------------------------------------------------------------------

  /** The client as the server knows it: registered dynamically, or by its metadata document. */
  private async clientOf(clientId: string): Promise<ClientMetadata | OAuthErrorAnswer> {
    const registered: RegisteredClient | undefined = await this.state.registered(clientId)
    if (registered !== undefined) {
      return { client_id: clientId, client_name: registered.client_name, redirect_uris: registered.redirect_uris, token_endpoint_auth_method: "none", jwks: null }
    }
    try {
      return await this.metadataDocs.get(clientId)
    } catch (e) {
      if (e instanceof ClientMetadataError) return oauthError(400, "invalid_client", e.message)
      throw e
    }
  }

  /**
   * Approves a client ahead of time (the admin route; the CLI writes the file itself) or from the
   * consent page, bound to `agent` and `tools`. A `machine` client approved without a metadata
   * document's keys gets a secret, returned once.
   */
  async approve(input: { readonly clientId: string; readonly agent: string; readonly tools: ReadonlyArray<string> | null; readonly machine: boolean; readonly by: ApprovedClient["approved_by"] }): Promise<{ readonly secret: string | undefined } | OAuthErrorAnswer> {
    const problem = approvalProblem(input.clientId, input.agent, input.tools, this.options.devLoopbackClients)
    if (problem !== undefined) return oauthError(400, "invalid_request", problem)
    const secret = input.machine ? freshSecret() : undefined
    const entry: ApprovedClient = {
      agent: input.agent,
      tools: input.tools,
      machine: input.machine,
      secret_sha256: secret === undefined ? null : sha256(secret),
      approved: new Date(this.now()).toISOString(),
      approved_by: input.by
    }
    let stored: boolean
    try {
      stored = await this.state.putApproval(input.clientId, entry)
    } catch (e) {
      return unavailable(e)
    }
    if (!stored) return oauthError(400, "invalid_request", `at most ${GRANT_LIMITS.approved} clients may be approved`)
    log.info(`approved OAuth client ${input.clientId} for agent '${input.agent}' (${input.by}${input.machine ? ", machine" : ""})`, { event: "oauth_client_approved", client_id: input.clientId, agent: input.agent, by: input.by })
    return { secret }
  }

  /** The approved clients (the admin route; never a secret: only whether one is kept). */
  async clients(): Promise<ReadonlyArray<readonly [string, ApprovedClient]> | OAuthErrorAnswer> {
    try {
      return [...(await this.state.approvals())].sort(([a], [b]) => a.localeCompare(b))
    } catch (e) {
      return unavailable(e)
    }
  }

  /**
   * Withdraws a client's approval (the admin route): its refresh tokens' families are revoked, so
   * their access tokens are refused at once; an access token of a family with no refresh token (a
   * machine client's) ends with its 10 minutes. Undefined when the client was not approved.
   */
  async withdraw(clientId: string): Promise<{ readonly families: number } | undefined | OAuthErrorAnswer> {
    let withdrawn: { readonly families: number } | undefined
    try {
      withdrawn = await this.state.withdraw(clientId, this.now() + FAMILY_REVOKED_MS)
    } catch (e) {
      return unavailable(e)
    }
    if (withdrawn !== undefined) {
      log.warn(`withdrew the approval of OAuth client ${clientId} (${withdrawn.families} token families revoked)`, { event: "oauth_client_withdrawn", client_id: clientId, families: withdrawn.families })
    }
    return withdrawn
  }

  /** Dynamic Client Registration (RFC 7591), public clients only. */
  async register(body: unknown): Promise<{ readonly status: 201; readonly body: Record<string, unknown> } | OAuthErrorAnswer> {
    if (!this.options.dynamicRegistration) return oauthError(404, "invalid_request", "Dynamic Client Registration is turned off on this server (use a client metadata document)")
    if (typeof body !== "object" || body === null || Array.isArray(body)) return oauthError(400, "invalid_client_metadata", "the registration must be a JSON object")
    const raw = body as Record<string, unknown>
    const uris = raw["redirect_uris"]
    if (!Array.isArray(uris) || uris.length === 0 || uris.length > 20) return oauthError(400, "invalid_redirect_uri", "redirect_uris must list 1 to 20 URIs")
    for (const uri of uris) {
      const problem = redirectUriProblem(uri)
      if (problem !== undefined) return oauthError(400, "invalid_redirect_uri", problem)
    }
    const method = raw["token_endpoint_auth_method"] ?? "none"
    if (method !== "none") return oauthError(400, "invalid_client_metadata", "only public clients (token_endpoint_auth_method none) may register; machine clients are approved by the operator")
    const name = raw["client_name"]
    if (name !== undefined && (typeof name !== "string" || name.length > 200)) return oauthError(400, "invalid_client_metadata", "client_name must be a string of at most 200 characters")
    const clientId = `dcr_${randomBytes(16).toString("hex")}`
    const entry: RegisteredClient = { redirect_uris: uris as ReadonlyArray<string>, client_name: typeof name === "string" ? name : null, created: new Date(this.now()).toISOString() }
    try {
      await this.state.putRegistration(clientId, entry)
    } catch (e) {
      return unavailable(e)
    }
    log.info(`registered OAuth client ${clientId}${typeof name === "string" ? ` (${JSON.stringify(name.slice(0, 100))})` : ""}`, { event: "oauth_client_registered", client_id: clientId })
    return {
      status: 201,
      body: { client_id: clientId, client_id_issued_at: Math.floor(this.now() / 1000), redirect_uris: entry.redirect_uris, token_endpoint_auth_method: "none", grant_types: ["authorization_code", "refresh_token"], response_types: ["code"], ...(entry.client_name === null ? {} : { client_name: entry.client_name }) }
    }
  }

  // ---- authorization endpoint -------------------------------------------------------------

  /** The agent of a resource URI, or why it is not one of the store's agent endpoints. */
  resourceAgent(resource: string): { readonly agent: string } | { readonly problem: string } {
    const base = this.issuer
    const prefix = `${base}/for_agent/`
    if (resource === `${base}/mcp`) return { problem: `the store's own endpoint ${base}/mcp needs an admin key; a client is bound to an agent: ask for ${base}/for_agent/<agent_id>/mcp` }
    if (!resource.startsWith(prefix) || !resource.endsWith("/mcp")) return { problem: `resource must be one of this store's MCP endpoints (${base}/for_agent/<agent_id>/mcp)` }
    const encoded = resource.slice(prefix.length, -"/mcp".length)
    let agent: string
    try {
      agent = decodeURIComponent(encoded)
    } catch {
      return { problem: "resource names a malformed agent id" }
    }
    if (encoded.includes("/") || agentIdProblem(agent) !== undefined) return { problem: `resource names no valid agent id: ${agentIdProblem(agent) ?? "a slash"}` }
    return { agent }
  }

  private redirectWith(redirectUri: string, params: Record<string, string | undefined>): string {
    const url = new URL(redirectUri)
    for (const [k, v] of Object.entries(params)) if (v !== undefined) url.searchParams.set(k, v)
    url.searchParams.set("iss", this.issuer)
    return url.href
  }

  /** The authorization endpoint (GET /oauth/authorize): a code at once for an approved client, else the consent page. */
  async authorize(query: Readonly<Record<string, unknown>>): Promise<AuthorizeOutcome> {
    try {
      return await this.authorizeOn(query)
    } catch (e) {
      unavailable(e)
      return { kind: "page", status: 503, message: "The authorization server cannot reach its state now; try again shortly." }
    }
  }

  private async authorizeOn(query: Readonly<Record<string, unknown>>): Promise<AuthorizeOutcome> {
    const clientId = one(query["client_id"])
    const redirectUri = one(query["redirect_uri"])
    if (clientId === undefined || clientId === "") return { kind: "page", status: 400, message: "The request names no client (client_id)." }
    const client = await this.clientOf(clientId)
    if ("error" in client) {
      // The id is not known good: quoted, so a line break in it cannot forge a log line.
      log.warn(`refused an authorization request of client ${JSON.stringify(clientId.slice(0, 200))}: ${client.description}`, { event: "oauth_authorize_refused", client_id: clientId.slice(0, 200) })
      return { kind: "page", status: 400, message: `The client cannot be used: ${client.description}.` }
    }
    // The redirect URI must be one of the document's, exactly: nothing is sent anywhere else.
    if (redirectUri === undefined || !client.redirect_uris.includes(redirectUri)) {
      log.warn(`refused an authorization request of client ${clientId}: redirect_uri is not one of its redirect_uris`, { event: "oauth_authorize_refused", client_id: clientId })
      return { kind: "page", status: 400, message: "The redirect URI is not one the client's metadata lists." }
    }
    const state = one(query["state"])
    const fail = (error: string, description: string): AuthorizeOutcome => {
      log.warn(`refused an authorization request of client ${clientId}: ${error}: ${description}`, { event: "oauth_authorize_refused", client_id: clientId, error })
      return { kind: "redirect", location: this.redirectWith(redirectUri, { error, error_description: description, state }) }
    }
    if (query["response_type"] !== "code") return fail("unsupported_response_type", "response_type must be code")
    const challenge = one(query["code_challenge"])
    if (query["code_challenge_method"] !== "S256" || challenge === undefined || !/^[A-Za-z0-9_-]{43}$/.test(challenge)) {
      return fail("invalid_request", "PKCE is required: code_challenge (S256 of the verifier, base64url) and code_challenge_method=S256")
    }
    const resource = one(query["resource"])
    if (resource === undefined) return fail("invalid_target", `resource is required: the MCP endpoint the token is for (${this.issuer}/for_agent/<agent_id>/mcp)`)
    const target = this.resourceAgent(resource)
    if ("problem" in target) return fail("invalid_target", target.problem)
    const scope = grantedScope(one(query["scope"]))
    const request: CheckedRequest = { clientId, redirectUri, state, challenge, resource, agent: target.agent, scope }
    try {
      return await this.consentOrCode(request, client.client_name)
    } catch (e) {
      // The state is away: back to the client with the RFC 6749 error for it.
      unavailable(e)
      return fail("temporarily_unavailable", "the authorization server's state cannot be reached now; try again shortly")
    }
  }

  private async consentOrCode(request: CheckedRequest, clientName: string | null): Promise<AuthorizeOutcome> {
    const { clientId, redirectUri, scope } = request
    const target = { agent: request.agent }
    const approval = await this.state.approval(clientId)
    if (approval !== undefined && approval.agent === target.agent) return { kind: "redirect", location: await this.issueCode(request, approval.tools) }
    // The operator decides on the consent page.
    const requestId = randomBytes(24).toString("base64url")
    const view: ConsentView = { request_id: requestId, client_id: clientId, client_name: clientName, redirect_uri: redirectUri, agent: target.agent, tools: approval?.tools ?? null, scope }
    await this.state.putConsent(requestId, { view, request, expires: this.now() + CONSENT_MS })
    log.info(`OAuth client ${clientId} asks for agent '${target.agent}': waiting for the operator's consent`, { event: "oauth_consent_pending", client_id: clientId, agent: target.agent })
    return { kind: "consent", consent: view }
  }

  /**
   * The operator's decision (POST /oauth/consent, admin key): approve binds the client to the
   * request's agent with `tools` and sends a code; deny sends `access_denied`. Used once.
   */
  async decide(requestId: string, approve: boolean, tools: ReadonlyArray<string> | null): Promise<{ readonly location: string } | OAuthErrorAnswer> {
    if (tools !== null) {
      const problem = globsProblem(tools)
      if (problem !== undefined) return oauthError(400, "invalid_request", `tools ${problem}`)
    }
    let pending
    try {
      pending = await this.state.takeConsent(requestId)
    } catch (e) {
      return unavailable(e)
    }
    if (pending === undefined) return oauthError(404, "invalid_request", "No authorization request waits under this id (it expired or was decided)")
    const r = pending.request
    if (!approve) {
      log.info(`the operator denied OAuth client ${r.clientId} for agent '${r.agent}'`, { event: "oauth_consent_denied", client_id: r.clientId, agent: r.agent })
      return { location: this.redirectWith(r.redirectUri, { error: "access_denied", error_description: "the operator denied the request", state: r.state }) }
    }
    const approved = await this.approve({ clientId: r.clientId, agent: r.agent, tools, machine: false, by: "consent" })
    if ("error" in approved && approved.status === 503) return this.keepConsent(requestId, pending, approved)
    if ("error" in approved) return approved
    try {
      return { location: await this.issueCode(r, tools) }
    } catch (e) {
      return this.keepConsent(requestId, pending, unavailable(e))
    }
  }

  /** A decision that failed with the state away: the consent waits again, so that it can be decided once the state is back. */
  private async keepConsent(requestId: string, pending: PendingConsent, answer: OAuthErrorAnswer): Promise<OAuthErrorAnswer> {
    await this.state.putConsent(requestId, pending).catch((e: unknown) => log.warn(`a consent could not be put back to wait: ${e instanceof Error ? e.message : String(e)}`, { event: "oauth_server_unavailable" }))
    return answer
  }

  private async issueCode(request: CheckedRequest, tools: ReadonlyArray<string> | null): Promise<string> {
    const code = freshSecret()
    await this.state.putCode(sha256(code), { ...request, tools, expires: this.now() + CODE_MS })
    log.info(`issued an authorization code to OAuth client ${request.clientId} for agent '${request.agent}'`, { event: "oauth_code_issued", client_id: request.clientId, agent: request.agent })
    return this.redirectWith(request.redirectUri, { code, state: request.state })
  }

  // ---- token endpoint ---------------------------------------------------------------------

  /** The token endpoint (POST /oauth/token, form-encoded). */
  async token(form: URLSearchParams, authorization: string | undefined): Promise<TokenAnswer> {
    const raw = form.get("grant_type")
    // Quoted in log lines: it is the caller's text.
    const grant = raw === null ? null : raw.slice(0, 60)
    let client: Caller | OAuthErrorAnswer
    try {
      client = await this.authenticate(form, authorization)
    } catch (e) {
      return unavailable(e)
    }
    if ("error" in client) {
      log.warn(`refused a token request (${grant === null ? "no grant_type" : JSON.stringify(grant)}): ${client.description}`, { event: "oauth_token_refused", grant_type: grant ?? undefined })
      return client
    }
    const answer = await (grant === "authorization_code"
      ? this.codeGrant(form, client)
      : grant === "refresh_token"
        ? this.refreshGrant(form, client)
        : grant === "client_credentials"
          ? this.clientCredentialsGrant(form, client)
          : Promise.resolve(oauthError(400, "unsupported_grant_type", "grant_type must be authorization_code, refresh_token or client_credentials"))
    ).catch(unavailable)
    if ("error" in answer) log.warn(`refused a token request (${grant === null ? "no grant_type" : JSON.stringify(grant)}) of client ${JSON.stringify(client.clientId.slice(0, 200))}: ${answer.error}: ${answer.description}`, { event: "oauth_token_refused", client_id: client.clientId, grant_type: grant ?? undefined, error: answer.error })
    return answer
  }

  /**
   * Who is asking: a machine client with its secret (Basic or form), a client signing an assertion
   * with a key of its metadata document (`private_key_jwt`), or a public client by its id.
   */
  private async authenticate(form: URLSearchParams, authorization: string | undefined): Promise<Caller | OAuthErrorAnswer> {
    let clientId = form.get("client_id") ?? undefined
    let secret = form.get("client_secret") ?? undefined
    if (authorization !== undefined && /^basic /i.test(authorization)) {
      const decoded = Buffer.from(authorization.slice(6).trim(), "base64").toString("utf8")
      const colon = decoded.indexOf(":")
      if (colon < 0) return oauthError(401, "invalid_client", "malformed Basic credentials")
      try {
        clientId = decodeURIComponent(decoded.slice(0, colon).replace(/\+/g, " "))
        secret = decodeURIComponent(decoded.slice(colon + 1).replace(/\+/g, " "))
      } catch {
        return oauthError(401, "invalid_client", "malformed Basic credentials")
      }
    }
    const assertion = form.get("client_assertion")
    if (assertion !== null) {
      if (form.get("client_assertion_type") !== ASSERTION_TYPE) return oauthError(401, "invalid_client", `client_assertion_type must be ${ASSERTION_TYPE}`)
      return this.checkAssertion(assertion, clientId)
    }
    if (clientId === undefined || clientId === "" || clientId.length > 2048) return oauthError(401, "invalid_client", "the request names no client (client_id)")
    if (secret !== undefined) {
      const approval = await this.state.approval(clientId)
      if (approval?.secret_sha256 === null || approval === undefined || !digestEqual(sha256(secret), approval.secret_sha256)) {
        return oauthError(401, "invalid_client", "unknown client or wrong client secret")
      }
      return { clientId, authenticated: true }
    }
    return { clientId, authenticated: false }
  }

  private async checkAssertion(assertion: string, named: string | undefined): Promise<{ readonly clientId: string; readonly authenticated: true } | OAuthErrorAnswer> {
    let clientId: string | undefined
    try {
      decodeProtectedHeader(assertion)
      const payload = JSON.parse(Buffer.from(assertion.split(".")[1] ?? "", "base64url").toString("utf8")) as { iss?: unknown }
      clientId = typeof payload.iss === "string" ? payload.iss : undefined
    } catch {
      return oauthError(401, "invalid_client", "client_assertion is not a JWT")
    }
    if (clientId === undefined || (named !== undefined && named !== clientId)) return oauthError(401, "invalid_client", "client_assertion's iss must be the client id")
    const client = await this.clientOf(clientId)
    if ("error" in client) return oauthError(401, "invalid_client", client.description)
    const notSigning = oauthError(401, "invalid_client", "the client's metadata document does not use private_key_jwt")
    if (client.token_endpoint_auth_method !== "private_key_jwt" || client.jwks === null) return notSigning
    const verify = (keys: ReadonlyArray<JWK>) =>
      jwtVerify(assertion, createLocalJWKSet({ keys: [...keys] }), {
        issuer: clientId,
        subject: clientId,
        audience: [this.issuer, `${this.issuer}/oauth/token`],
        algorithms: ["ES256", "RS256", "PS256", "EdDSA"],
        maxTokenAge: ASSERTION_MAX_AGE_SECONDS,
        requiredClaims: ["exp", "jti"]
      })
    let verified
    try {
      try {
        verified = await verify(client.jwks)
      } catch (e) {
        // A key the kept document lacks: the client may have rotated its keys. Its document is read
        // again once, and at most every so often per client (`refetch`), so made-up kids cannot make
        // the store fetch on every request.
        if (!(e instanceof errors.JWKSNoMatchingKey)) throw e
        const again = await this.metadataDocs.refetch(clientId)
        if (again === undefined) throw e
        if (again.token_endpoint_auth_method !== "private_key_jwt" || again.jwks === null) return notSigning
        verified = await verify(again.jwks)
      }
    } catch (e) {
      return oauthError(401, "invalid_client", `client_assertion refused: ${e instanceof Error ? e.message.slice(0, 200) : "invalid"}`)
    }
    const { exp, iat } = verified.payload as { readonly exp: number; readonly iat: number }
    if (exp - iat > ASSERTION_MAX_LIFETIME_SECONDS) return oauthError(401, "invalid_client", `client_assertion's exp may be at most ${ASSERTION_MAX_LIFETIME_SECONDS} seconds after its iat`)
    // Its replay record lasts while it could be accepted (its age is bounded), whatever its exp says.
    const until = Math.min(exp, iat + ASSERTION_MAX_AGE_SECONDS + CLOCK_TOLERANCE_SECONDS) * 1000
    const jti = `${clientId} ${String(verified.payload.jti)}`
    if (!(await this.state.useAssertion(jti, until))) return oauthError(401, "invalid_client", "client_assertion was used already")
    return { clientId, authenticated: true }
  }

  /**
   * A refusal when the caller did not authenticate but its client is confidential (OAuth 2.1 3.2.1):
   * one approved with a secret, or (`known`, as recorded when its tokens were first given; else its
   * metadata document, read again if it is not kept) one that named an authentication method. A
   * refresh decides by its record, so a client's document that cannot be fetched at that moment
   * does not fail a public client's refresh.
   */
  private async unauthenticatedConfidential(caller: Caller, known?: boolean): Promise<OAuthErrorAnswer | undefined> {
    if (caller.authenticated) return undefined
    const confidential = known === true || (await this.confidential(caller.clientId, known === undefined))
    if (typeof confidential !== "boolean") return confidential
    return confidential ? mustAuthenticate() : undefined
  }

  /**
   * Whether a client must authenticate: approved with a secret, or (`byDocument`) its document or
   * registration names a method. `approval`: the client's approval read already by the caller.
   */
  private async confidential(clientId: string, byDocument: boolean, approval?: ApprovedClient): Promise<boolean | OAuthErrorAnswer> {
    if (typeof (approval ?? (await this.state.approval(clientId)))?.secret_sha256 === "string") return true
    if (!byDocument) return false
    const client = await this.clientOf(clientId)
    if ("error" in client) return oauthError(401, "invalid_client", client.description)
    return client.token_endpoint_auth_method !== "none"
  }

  private async codeGrant(form: URLSearchParams, caller: Caller): Promise<TokenAnswer> {
    const clientId = caller.clientId
    const code = form.get("code")
    const verifier = form.get("code_verifier")
    if (code === null || verifier === null) return oauthError(400, "invalid_request", "code and code_verifier are required")
    const key = sha256(code)
    const found = await this.state.code(key)
    if (found === undefined || found.record.clientId !== clientId) return oauthError(400, "invalid_grant", "unknown or expired code")
    // The client's approval, as it is now: a withdrawn one gets nothing (below); a secret makes it confidential.
    const approval = await this.state.approval(clientId)
    // Before anything the code may set off (a second use revokes): only the client itself may.
    const confidential = await this.confidential(clientId, true, approval)
    if (typeof confidential !== "boolean") return confidential
    if (confidential && !caller.authenticated) return mustAuthenticate()
    const record = found.record
    if (found.used) {
      // A code used twice: what it gave is revoked (OAuth 2.1, 4.1.3).
      if (found.family !== undefined) await this.revokeFamily(found.family, "authorization code used twice")
      return oauthError(400, "invalid_grant", "the code was used already; the tokens it gave are revoked")
    }
    if (record.expires <= this.now()) {
      await this.state.dropCode(key)
      return oauthError(400, "invalid_grant", "the code expired")
    }
    if (form.get("redirect_uri") !== record.redirectUri) return oauthError(400, "invalid_grant", "redirect_uri is not the authorization request's")
    if (!/^[A-Za-z0-9._~-]{43,128}$/.test(verifier) || !digestEqual(s256(verifier), record.challenge)) return oauthError(400, "invalid_grant", "code_verifier does not match the code_challenge")
    const resource = form.get("resource")
    if (resource !== null && resource !== record.resource) return oauthError(400, "invalid_target", "resource is not the authorization request's")
    if (approval === undefined || approval.agent !== record.agent) return oauthError(400, "invalid_grant", "the client is no longer approved for this agent")
    // One exchange wins, on any replica: a second one at the same moment is a second use.
    const family = randomBytes(12).toString("base64url")
    const claimed = await this.state.claimCode(key, family)
    if (!claimed.first) {
      if (claimed.family !== undefined) await this.revokeFamily(claimed.family, "authorization code used twice")
      return oauthError(400, "invalid_grant", "the code was used already; the tokens it gave are revoked")
    }
    return this.issueTokens({ clientId, agent: record.agent, tools: approval.tools, resource: record.resource, scope: record.scope, family, sub: `agent:${record.agent}`, refresh: true, confidential })
  }

  private async refreshGrant(form: URLSearchParams, caller: Caller): Promise<TokenAnswer> {
    const clientId = caller.clientId
    const token = form.get("refresh_token")
    if (token === null) return oauthError(400, "invalid_request", "refresh_token is required")
    const key = sha256(token)
    const record: RefreshRecord | undefined = await this.state.refresh(key)
    if (record === undefined || record.client_id !== clientId) return oauthError(400, "invalid_grant", "unknown refresh token")
    // Before anything the token may set off (a reuse revokes its family): only the client itself may.
    // The client's approval, as it is now: a client no longer approved for the agent gets nothing (below).
    const approval = await this.state.approval(clientId)
    // A record of an older version has no mark: its client's document decides, once, and the rotated record keeps it.
    const confidential = record.confidential ?? (await this.confidential(clientId, true, approval))
    if (typeof confidential !== "boolean") return confidential
    if (confidential && !caller.authenticated) return mustAuthenticate()
    if (record.used) {
      await this.revokeFamily(record.family, "a rotated refresh token was used again")
      return oauthError(400, "invalid_grant", "the refresh token was used already; its whole family is revoked")
    }
    if (record.expires <= this.now()) return oauthError(400, "invalid_grant", "the refresh token expired")
    const resource = form.get("resource")
    if (resource !== null && resource !== record.resource) return oauthError(400, "invalid_target", "resource is not the one the refresh token was given for")
    if (approval === undefined || approval.agent !== record.agent) {
      await this.revokeFamily(record.family, "the client is no longer approved for the agent")
      return oauthError(400, "invalid_grant", "the client is no longer approved for this agent")
    }
    // Rotated once, on any replica: a second request with the same token, however close, is a reuse.
    if (!(await this.state.rotateRefresh(key))) {
      await this.revokeFamily(record.family, "a rotated refresh token was used again")
      return oauthError(400, "invalid_grant", "the refresh token was used already; its whole family is revoked")
    }
    return this.issueTokens({ clientId, agent: record.agent, tools: approval.tools, resource: record.resource, scope: record.scope, family: record.family, sub: `agent:${record.agent}`, refresh: true, confidential })
  }

  private async clientCredentialsGrant(form: URLSearchParams, client: Caller): Promise<TokenAnswer> {
    if (!client.authenticated) return oauthError(401, "invalid_client", "client credentials need the client's secret or a private_key_jwt assertion")
    const approval = await this.state.approval(client.clientId)
    if (approval === undefined || !approval.machine) return oauthError(400, "unauthorized_client", "the client is not approved as a machine client (approve-client --machine)")
    const resource = form.get("resource") ?? `${this.issuer}/for_agent/${encodeURIComponent(approval.agent)}/mcp`
    const target = this.resourceAgent(resource)
    if ("problem" in target) return oauthError(400, "invalid_target", target.problem)
    if (target.agent !== approval.agent) return oauthError(400, "invalid_target", `the client is bound to agent '${approval.agent}'`)
    return this.issueTokens({ clientId: client.clientId, agent: approval.agent, tools: approval.tools, resource, scope: grantedScope(form.get("scope") ?? undefined).replace(/\s*offline_access/, "").trim(), family: randomBytes(12).toString("base64url"), sub: client.clientId, refresh: false, confidential: true })
  }

  private signingKey(): SigningKey {
    if (this.key === undefined) throw new Error("the authorization server has no signing key yet")
    return this.key
  }

  private async issueTokens(t: {
    readonly clientId: string
    readonly agent: string
    readonly tools: ReadonlyArray<string> | null
    readonly resource: string
    readonly scope: string
    readonly family: string
    readonly sub: string
    readonly refresh: boolean
    /** The client must authenticate to use the refresh token (recorded with it). */
    readonly confidential: boolean
  }): Promise<TokenAnswer> {
    const now = Math.floor(this.now() / 1000)
    const access = await new SignJWT({ client_id: t.clientId, scope: t.scope, role: "agent", agent_id: t.agent, ...(t.tools === null ? {} : { tools: [...t.tools] }), fam: t.family })
      .setProtectedHeader({ alg: "ES256", kid: this.signingKey().kid, typ: "at+jwt" })
      .setIssuer(this.issuer)
      .setAudience(t.resource)
      .setSubject(t.sub)
      .setIssuedAt(now)
      .setExpirationTime(now + ACCESS_TOKEN_SECONDS)
      .setJti(randomBytes(16).toString("base64url"))
      .sign(this.signingKey().privateKey)
    let refresh: string | undefined
    if (t.refresh) {
      refresh = freshSecret()
      const record: RefreshRecord = {
        family: t.family,
        client_id: t.clientId,
        agent: t.agent,
        tools: t.tools,
        resource: t.resource,
        scope: t.scope,
        expires: this.now() + REFRESH_MS,
        used: false,
        confidential: t.confidential
      }
      await this.state.putRefresh(sha256(refresh), record)
    }
    log.info(`issued an access token to OAuth client ${t.clientId} for agent '${t.agent}'${refresh === undefined ? "" : " (with a refresh token)"}`, { event: "oauth_token_issued", client_id: t.clientId, agent: t.agent })
    return {
      status: 200,
      body: { access_token: access, token_type: "Bearer", expires_in: ACCESS_TOKEN_SECONDS, scope: t.scope, ...(refresh === undefined ? {} : { refresh_token: refresh }) }
    }
  }

  private async revokeFamily(family: string, why: string): Promise<void> {
    const client = await this.state.revokeFamily(family, this.now() + FAMILY_REVOKED_MS)
    log.warn(`revoked a token family${client === undefined ? "" : ` of OAuth client ${client}`}: ${why}`, { event: "oauth_family_revoked", client_id: client, why })
  }

  // ---- revocation -------------------------------------------------------------------------

  /** The revocation endpoint (RFC 7009): a refresh token revokes its family, an access token itself. Always 200 for a known client. */
  async revoke(form: URLSearchParams, authorization: string | undefined): Promise<{ readonly status: 200 } | OAuthErrorAnswer> {
    return this.revokeOn(form, authorization).catch(unavailable)
  }

  private async revokeOn(form: URLSearchParams, authorization: string | undefined): Promise<{ readonly status: 200 } | OAuthErrorAnswer> {
    const client = await this.authenticate(form, authorization)
    if ("error" in client) return client
    const token = form.get("token")
    if (token === null) return oauthError(400, "invalid_request", "token is required")
    const key = sha256(token)
    const record = await this.state.refresh(key)
    if (record !== undefined && record.client_id === client.clientId) {
      const unauthenticated = await this.unauthenticatedConfidential(client, record.confidential)
      if (unauthenticated !== undefined) return unauthenticated
      await this.revokeFamily(record.family, "revoked by its client")
      return { status: 200 }
    }
    let payload
    try {
      payload = (await jwtVerify(token, this.keys, { issuer: this.issuer, clockTolerance: CLOCK_TOLERANCE_SECONDS })).payload
    } catch {
      // An unknown or invalid token: nothing to revoke (RFC 7009, 2.2).
      return { status: 200 }
    }
    {
      if (payload["client_id"] === client.clientId && typeof payload.jti === "string") {
        // An access token lives ten minutes: its client's approval decides, its document is not fetched for it.
        const unauthenticated = await this.unauthenticatedConfidential(client, false)
        if (unauthenticated !== undefined) return unauthenticated
        await this.state.revokeToken(payload.jti, (payload.exp ?? 0) * 1000 + REVOKED_PAST_EXP_MS)
        log.info(`revoked an access token of OAuth client ${client.clientId}`, { event: "oauth_token_revoked", client_id: client.clientId })
      }
    }
    return { status: 200 }
  }

  // ---- the resource side ------------------------------------------------------------------

  /** Whether a verified access token was revoked (its own `jti`, or its family). */
  isRevoked(payload: { readonly jti?: unknown; readonly fam?: unknown }): boolean {
    return this.state.isRevoked(String(payload.jti), String(payload.fam))
  }

  /**
   * This server as an issuer the protected resource trusts (src/http/oauth-resource/token-verifier.ts):
   * its tokens are checked as any trusted issuer's (signature, audience, expiry, claims, scope), and
   * refused once revoked.
   */
  trustedIssuer(): TrustedIssuer {
    return { issuer: this.issuer, keys: this.keys, revoked: (payload) => this.isRevoked(payload) }
  }
}

/** The scope granted for a requested one: the supported scopes asked for, `mcp` when none. */
const grantedScope = (asked: string | undefined): string => {
  const words = (asked ?? "").split(/\s+/).filter((w) => (SCOPES as ReadonlyArray<string>).includes(w))
  if (!words.includes(TOOLS_SCOPE)) words.unshift(TOOLS_SCOPE)
  return [...new Set(words)].join(" ")
}

/** Why an approval is refused (client id form, agent id, tool globs), or undefined. */
export const approvalProblem = (clientId: string, agent: string, tools: ReadonlyArray<string> | null, devLoopback: boolean): string | undefined => {
  if (!/^dcr_[0-9a-f]{32}$/.test(clientId)) {
    const problem = clientIdProblem(clientId, devLoopback)
    if (problem !== undefined) return problem
  }
  const agentProblem = agentIdProblem(agent)
  if (agentProblem !== undefined) return `agent ${agentProblem}`
  if (tools !== null) {
    const problem = globsProblem(tools)
    if (problem !== undefined) return `tools ${problem}`
  }
  return undefined
}
