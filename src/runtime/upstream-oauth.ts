/**
 * OAuth for upstream MCP servers that require it (the MCP authorization spec), on SDK v2's client
 * auth (`@modelcontextprotocol/client`, loaded with the first OAuth step: the package costs a start
 * 50 ms): `auth()` runs discovery (RFC 9728 resource metadata, authorization server metadata, whose
 * `issuer` must echo its URL), dynamic registration, PKCE S256, the `resource` parameter and RFC
 * 9207's `iss` check on the code exchange; machine credentials run through the same `auth()` with a
 * client-credentials provider of the store's; refreshes use the SDK's `refreshAuthorization`
 * directly, so that an `invalid_grant` (a user must authorize again) is told apart from any other
 * failure (shown in last_error, never turned into a silent new redirect). The SDK's console
 * warnings during these steps go to the store's log (`quietly`).
 *
 * One `ServiceAuth` per service is the token source of its connections (src/mcp/oauth-client.ts): the
 * token is refreshed shortly before it expires and on a 401, one refresh at a time per service.
 * Tokens, registrations and discovery state live encrypted in the `TokenVault`, and so do the
 * PKCE verifier and `state` of each authorization under way (a restart does not lose them), bound
 * to the service, single use, expiring after 10 minutes, at most `MAX_PENDING` at once per scope. Every OAuth request
 * goes through the manager's `fetch` (bounded, timed, under the outbound policy). The service actor is told the
 * public side of it all (`AuthInfo`: never a token) for the views and events.
 *
 * A `per_user` service with `oauth: true` (README, Per-user credentials) also has one `ServiceAuth` per
 * principal (the caller's owner digest), the token source of that principal's own connections: its
 * entry in the same vault under `principalKey` (scope, service, principal), its authorizations under way
 * bound to the principal too (a state started by one principal never stores a token for another), and
 * nothing of it told to the service's actor (the shared connection keeps the service-wide authorization).
 */
import { AsyncLocalStorage } from "node:async_hooks"
import { randomBytes } from "node:crypto"
import type * as Client from "@modelcontextprotocol/client"
import type { OAuthClientMetadata, OAuthClientProvider, OAuthDiscoveryState, OAuthTokens, StoredOAuthClientInformation } from "@modelcontextprotocol/client"
import { scopeLabel, type Scope } from "../domain/service-definition.js"
import type { AuthInfo, ServiceActorRef } from "../machines/service.js"
import { AuthorizationRequiredError, type BearerChallenge, type UpstreamAuth } from "../mcp/oauth-client.js"
import { Effect, Option, Schema } from "effect"
import { OAuthSettings } from "../domain/schemas.js"
import { resolveDefinition, type ServiceDefinition } from "../domain/service-definition.js"
import { definitionHasReferences, expandDefinition, expandOAuth, oauthHasReferences } from "../domain/references.js"
import { ClusterUnavailable, TooMany, UpstreamError, ValidationError, type ServiceNotFound } from "../domain/errors.js"
import type { ScopeContext } from "./host.js"
import { log } from "../logging/log.js"
import { issuerOf, type TokenStore, type VaultEntry } from "../config/token-vault.js"
import { clientPackage, loadedClientPackage } from "../mcp/client-package.js"
import { principalWords } from "./user-credentials.js"

/** The service an OAuth step of the SDK runs for, while it runs (`quietly`). */
const sdkStep = new AsyncLocalStorage<string>()
/**
 * The `console.warn` this copy of the module put in front last (`routeWarnings`). Known by identity,
 * not by a mark on the function: a spy (vitest's `vi.spyOn`) copies a function's own properties, so
 * a mark would survive the function being replaced. Another copy of the module (loaded afresh in
 * the same process) has its own, and puts it in front with its own `sdkStep`.
 */
let installed: typeof console.warn | undefined

/**
 * Puts the store's `console.warn` in front of whatever `console.warn` is now, unless it is there
 * already: a program (or a test) that replaced `console.warn` after the store did would otherwise
 * get the SDK's warnings again.
 */
const routeWarnings = (): void => {
  const current = console.warn
  if (current === installed) return
  installed = (...args: Array<unknown>) => {
    const service = sdkStep.getStore()
    const text = args[0]
    if (service === undefined || typeof text !== "string" || !text.startsWith("[mcp-sdk] ")) return current.apply(console, args)
    // An authorization server's error text comes in it (up to 64 KB): one line of bounded length.
    const message = `OAuth of ${service}: the SDK says: ${text.slice("[mcp-sdk] ".length, "[mcp-sdk] ".length + 500)}`
    if (text.startsWith('[mcp-sdk] OAuth "')) log.debug(message, { event: "oauth_sdk_warning" })
    else log.warn(message, { event: "oauth_sdk_warning" })
  }
  console.warn = installed
}

/**
 * Runs an OAuth step of the SDK with its console warnings (`[mcp-sdk] ...`) written to the store's
 * log instead, as warnings about `label`; a warning that the authorization server refused a
 * credential (its `OAuth "invalid_grant"`, `"invalid_client"`) is a debug line: the store logs the
 * refusal itself. Warnings of anything else, at the same moment, are left as they are.
 */
const quietly = <A>(label: string, step: () => Promise<A>): Promise<A> => {
  routeWarnings()
  return sdkStep.run(label, step)
}

/** What the callback or a pasted answer of the authorization server brings back (RFC 6749 4.1.2, RFC 9207). */
export interface AuthorizationResponse {
  readonly code: string
  readonly state: string
  /** The authorization server's issuer (RFC 9207): sent by one that advertises `authorization_response_iss_parameter_supported`. */
  readonly iss?: string | undefined
}

/** How long an authorization's `state` stays usable. */
export const STATE_TTL_MS = 10 * 60_000
/** Authorizations under way at once in one scope (its older ones are dropped first): one agent cannot crowd out another's. */
export const MAX_PENDING = 100
/** Authorizations under way at once in the whole store (the oldest dropped first): memory stays bounded however many agents there are. */
export const MAX_PENDING_TOTAL = 10_000
/** A token is refreshed when less than this much of its life is left (or half its life, if shorter). */
const REFRESH_MARGIN_MS = 60_000
/** The most principals whose own OAuth entries one service keeps (beyond: 429, as per-user credentials). */
export const MAX_PRINCIPAL_AUTHORIZATIONS = 1_000

/** The vault key of a service's own entry: `<scope label>/<service name>`. */
export const serviceKey = (scope: Scope, name: string): string => `${scopeLabel(scope)}/${name}`

/** The vault key of one principal's own entry of a `per_user` service (a NUL never appears in a name or a digest). */
export const principalKey = (scope: Scope, name: string, principal: string): string => `${serviceKey(scope, name)}\u0000${principal}`

/** A definition's `oauth` object (pre-registered client, machine credentials, scopes): src/domain/schemas.ts. */
export type OAuthConfig = OAuthSettings

const decodeOAuth = Schema.decodeUnknownOption(OAuthSettings)

/** A definition's `oauth`, as its schema checked it; undefined when absent or malformed (never thrown at a connect). */
export const oauthConfigOf = (value: unknown): OAuthConfig | undefined => (value === undefined ? undefined : Option.getOrUndefined(decodeOAuth(value)))

/**
 * A remote definition's URL and OAuth settings as a connect would use them, its `${VAR}` references
 * expanded from the environment; undefined when it is not remote, or cannot be expanded here (an
 * env file, an undefined variable): a token source built on the text as written would have another
 * origin, and its stored tokens would be dropped as if the service had moved.
 */
const remoteTargetOf = (definition: ServiceDefinition): { readonly url: string; readonly oauth: OAuthConfig | undefined } | undefined => {
  try {
    const resolved = resolveDefinition(definition)
    const oauth = oauthConfigOf((definition as Record<string, unknown>)["oauth"])
    if (resolved.kind !== "remote") return undefined
    if (!definitionHasReferences(resolved) && !oauthHasReferences(oauth)) return { url: resolved.url, oauth }
    if (resolved.envFile !== undefined) return undefined
    const expanded = expandDefinition(resolved, process.env)
    if (expanded.kind !== "remote") return undefined
    return { url: expanded.url, oauth: oauth === undefined ? undefined : expandOAuth(oauth, process.env) }
  } catch {
    return undefined
  }
}

/** An authorization under way, found by its `state`. */
interface Pending {
  readonly service: string
  readonly scope: Scope
  readonly name: string
  /** The principal a `per_user` authorization is for (its tokens are kept for it alone); absent: the service's own. */
  readonly principal?: string | undefined
  /** Who started the authorization, in words (the key's role and name), when the callback asks the browser first: a principal's own, or one an agent's key started. */
  readonly startedBy?: string | undefined
  verifier: string
  readonly redirectUri: string
  /**
   * The client registration the flow uses (its own, when the service's registration does not list
   * its redirect URI): the code is exchanged and the tokens refreshed as that client.
   */
  readonly client?: StoredOAuthClientInformation | undefined
  readonly expiresAt: number
}

/** Where the manager finds a service's actor, to tell it what happened. */
export type ActorLookup = (scope: Scope, name: string) => ServiceActorRef | undefined

export class OAuthManager {
  private readonly services = new Map<string, ServiceAuth>()
  /** The principals' own token sources of `per_user` OAuth services, by `principalKey`. */
  private readonly principals = new Map<string, ServiceAuth>()
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

  /** Drops a vault entry no longer to be used (another origin); a failure is a log line, the entry is not sent either way. */
  private removeQuietly(key: string): void {
    this.vault.remove(key).catch((e: unknown) => log.warn(`the OAuth tokens of ${key} could not be removed from the vault: ${e instanceof Error ? e.message : String(e)}`, { event: "oauth_vault_write_failed" }))
  }

  /**
   * The token source of a remote service (created on first use; a new origin drops old tokens, and
   * the principals' own ones too, as does a definition that no longer has `per_user.oauth`).
   */
  forService(scope: Scope, name: string, url: string, config: OAuthConfig | undefined, perUserOAuth = true): ServiceAuth {
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
      this.removeQuietly(key)
      log.info(`OAuth tokens of ${key} dropped: its URL moved to another origin`, { event: "oauth_tokens_dropped", service: key })
    }
    // The principals' own tokens of the service (per_user oauth) never follow it to another origin either.
    for (const entry of this.vault.entriesUnder(`${key}\u0000`)) {
      if (entry.origin === origin && perUserOAuth) continue
      this.principals.get(entry.service)?.retire()
      this.principals.delete(entry.service)
      this.removeQuietly(entry.service)
      const why = perUserOAuth ? "its URL moved to another origin" : "its definition no longer has per_user.oauth"
      log.info(`a principal's OAuth tokens of ${key} dropped: ${why}`, { event: "oauth_tokens_dropped", service: key })
    }
    return service
  }

  /**
   * A principal's own token source of a `per_user` OAuth service (created on first use; kept while
   * the URL and settings stay; a token kept for another origin is dropped, never sent).
   */
  forPrincipal(scope: Scope, name: string, url: string, config: OAuthConfig | undefined, principal: string): ServiceAuth {
    const key = principalKey(scope, name, principal)
    let auth = this.principals.get(key)
    const stored = this.vault.find(key)
    if (stored !== undefined && stored.origin !== new URL(url).origin) {
      auth?.retire()
      auth = undefined
      this.principals.delete(key)
      this.removeQuietly(key)
      log.info(`OAuth tokens of principal ${principalWords(principal)} for ${serviceKey(scope, name)} dropped: its URL moved to another origin`, { event: "oauth_tokens_dropped", service: serviceKey(scope, name) })
    }
    if (auth === undefined || auth.url !== url || JSON.stringify(auth.config) !== JSON.stringify(config)) {
      // Bounded: past the cap, the token sources not in the vault (authorizations never finished) go first, then the oldest.
      if (this.principals.size >= MAX_PENDING_TOTAL) {
        const idle = [...this.principals].find(([k]) => this.vault.find(k)?.tokens === undefined) ?? this.principals.entries().next().value
        if (idle !== undefined) this.principals.delete(idle[0])
      }
      auth = new ServiceAuth(this, scope, name, key, url, config, principal)
      this.principals.set(key, auth)
    }
    return auth
  }

  /**
   * Reads a principal's own entry of a service from where it is shared (replica mode: Redis), so
   * that `hasToken` and `principalStatus` tell what any replica did up to now (an authorization
   * finished, its tokens deleted). Rejects `ClusterUnavailable` when Redis does not answer in time.
   */
  async readPrincipal(scope: Scope, name: string, principal: string): Promise<void> {
    await shared(`reading the OAuth authorization of principal ${principalWords(principal)}`, () => this.vault.readThrough?.(principalKey(scope, name, principal)) ?? Promise.resolve())
  }

  /** Whether a principal holds its own token of a service (a call of it can go through). */
  hasToken(scope: Scope, name: string, principal: string): boolean {
    return this.vault.find(principalKey(scope, name, principal))?.tokens !== undefined
  }

  /** What a principal may see of its own authorization of a service: whether it holds a token, and until when (never the token). */
  principalStatus(scope: Scope, name: string, principal: string): { readonly authorized: boolean; readonly expires_at: string | null } {
    const tokens = this.vault.find(principalKey(scope, name, principal))?.tokens
    if (tokens === undefined) return { authorized: false, expires_at: null }
    return { authorized: true, expires_at: tokens.expires_in === undefined ? null : new Date(tokens.obtained_at + tokens.expires_in * 1000).toISOString() }
  }

  /** How many principals keep their own OAuth entry of a service (for the cap). */
  principalCount(scope: Scope, name: string): number {
    return this.vault.entriesUnder(`${serviceKey(scope, name)}\u0000`).length
  }

  /** Forgets a principal's own tokens of a service and its authorizations under way; false when it had none. */
  async forgetPrincipal(scope: Scope, name: string, principal: string): Promise<boolean> {
    const key = principalKey(scope, name, principal)
    await this.readPrincipal(scope, name, principal)
    const had = this.vault.find(key)?.tokens !== undefined
    this.principals.get(key)?.retire()
    this.principals.delete(key)
    for (const [state, p] of this.pending) if (p.service === key) this.dropState(state)
    // Under the refresh lock (replica mode: across replicas): a refresh under way elsewhere ends
    // first, and one that starts after finds no entry and refreshes nothing (a deleted token never comes back).
    if (this.vault.find(key) !== undefined) {
      await shared(`deleting the OAuth tokens of principal ${principalWords(principal)}`, () => this.vault.exclusive(key, () => this.vault.remove(key)))
    }
    if (had) log.info(`OAuth tokens of principal ${principalWords(principal)} for ${serviceKey(scope, name)} deleted`, { event: "oauth_tokens_dropped", service: serviceKey(scope, name) })
    return had
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
    const principals = `${key}\u0000`
    for (const [k, auth] of this.principals) {
      if (!k.startsWith(principals)) continue
      auth.retire()
      this.principals.delete(k)
    }
    for (const [state, p] of this.pending) if (p.service === key || p.service.startsWith(principals)) this.dropState(state)
    await this.vault.remove(key)
    // Each principal's own tokens of it (per_user oauth) go with it too.
    for (const entry of this.vault.entriesUnder(principals)) await this.vault.remove(entry.service)
  }

  /** Tells the service's actor something (the public side only). */
  tell(service: ServiceAuth, event: { type: "AUTH_CHANGED"; auth: AuthInfo | undefined } | { type: "AUTH_REQUIRED"; reason: string } | { type: "AUTHORIZED" }): void {
    // A principal's own authorization is its own: the service (its shared connection, its views) is not told.
    if (service.principal !== undefined) return
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

  /** Forgets an authorization under way (expired, crowded out, its service deleted), here and where it is kept. */
  private dropState(state: string): void {
    if (!this.forgetState(state)) return
    void this.vault.removePending(state, false).catch((e: unknown) =>
      log.warn(`an expired OAuth authorization could not be removed from the token store: ${e instanceof Error ? e.message : String(e)}`, { event: "oauth_vault_write_failed" })
    )
  }

  /** Forgets an authorization under way in this process's memory; false when it knew none. */
  private forgetState(state: string): boolean {
    const p = this.pending.get(state)
    if (p === undefined) return false
    this.pending.delete(state)
    const label = scopeLabel(p.scope)
    const mine = this.pendingByScope.get(label)
    mine?.delete(state)
    if (mine?.size === 0) this.pendingByScope.delete(label)
    return true
  }

  /** The PKCE verifier of an authorization under way: kept with its state, and in the vault (encrypted) for a restart. */
  attachVerifier(state: string, verifier: string): Promise<void> {
    const p = this.pending.get(state)
    if (p === undefined) return Promise.resolve()
    p.verifier = verifier
    return shared("keeping the authorization under way", () => this.vault.putPending({ state, ...p }))
  }

  /**
   * Finishes an authorization with what the authorization server sent back (callback or pasted).
   * The state is used once; when `expected` is given (a pasted code), it must belong to that service.
   * A code without the `iss` its authorization server advertises is refused before the state is
   * taken (the same state may be pasted again, with `iss`). Resolves with the service's key;
   * rejects with a message safe to show (no input echoed).
   */
  async finish(response: AuthorizationResponse, expected?: { readonly scope: Scope; readonly name: string; readonly principal?: string | undefined }): Promise<string> {
    const { code, state, iss } = response
    // A pasted state is checked before it is taken: another principal (or the service's own flow)
    // presenting it changes nothing, not even the state's owner's chance to finish. It may have been
    // started on another replica: then it is read from the shared token store.
    const peek = this.pending.get(state) ?? (expected === undefined ? undefined : await shared("reading the authorization under way", () => this.vault.findPending(state)))
    if (expected !== undefined && peek !== undefined && peek.principal !== expected.principal) {
      log.warn(`OAuth authorization refused: a state was presented by ${expected.principal === undefined ? "the service's own flow" : `principal ${principalWords(expected.principal)}`}, not the one that started it`, {
        event: "oauth_failed",
        service: serviceKey(expected.scope, expected.name)
      })
      throw new OAuthFlowError("this state was not started by you for this service: start the authorization again")
    }
    if (iss === undefined && peek !== undefined && (expected === undefined || (scopeLabel(expected.scope) === scopeLabel(peek.scope) && expected.name === peek.name))) {
      const service = this.authOf(peek)
      if (service !== undefined && (await service.sendsIss())) {
        log.warn(`OAuth authorization of ${service.label} refused: the code came without the iss its authorization server sends (RFC 9207)`, { event: "oauth_failed", service: serviceKey(peek.scope, peek.name) })
        throw new OAuthFlowError(
          "the service's authorization server sends the issuer with the code (RFC 9207, against mix-up attacks): give `iss` too, the iss parameter of the address the browser was sent back to, with the same code and state",
          "iss"
        )
      }
    }
    const pending = await this.takeState(state)
    if (pending === undefined) throw new OAuthFlowError("unknown, expired or already used state: start the authorization again")
    if (expected !== undefined && (scopeLabel(expected.scope) !== scopeLabel(pending.scope) || expected.name !== pending.name)) {
      throw new OAuthFlowError("this state belongs to another service: start the authorization again")
    }
    const service = this.authOf(pending)
    if (service === undefined) throw new OAuthFlowError("the service is gone: start the authorization again")
    try {
      await service.complete(code, iss, pending)
    } catch (e) {
      // The `iss` received is the attacker's choice in a mix-up: never shown, nor logged.
      const sdk = loadedClientPackage()
      if (sdk !== undefined && e instanceof sdk.IssuerMismatchError && e.kind === "authorization_response" && iss === undefined) {
        // Missed by the check above: a callback whose state was started on another replica (only this one's are looked at).
        log.warn(`OAuth authorization of ${service.label} refused: the code came without the iss its authorization server sends (RFC 9207)`, { event: "oauth_failed", service: serviceKey(pending.scope, pending.name) })
        throw new OAuthFlowError("the service's authorization server sends the issuer with the code (RFC 9207, against mix-up attacks), and none came: start the authorization again", "iss")
      }
      if (sdk !== undefined && e instanceof sdk.IssuerMismatchError && e.kind === "authorization_response") {
        log.warn(`OAuth authorization of ${service.label} refused: the iss given is not its authorization server's issuer (RFC 9207)`, { event: "oauth_failed", service: serviceKey(pending.scope, pending.name) })
        throw new OAuthFlowError(
          "the iss given is not the issuer of the service's authorization server (RFC 9207): the code may come from another authorization server (a mix-up); start the authorization again",
          "iss"
        )
      }
      log.warn(`OAuth authorization of ${service.label} failed: ${e instanceof Error ? e.message : String(e)}`, { event: "oauth_failed", service: serviceKey(pending.scope, pending.name) })
      throw new OAuthFlowError(`the authorization server refused the code: ${e instanceof Error ? e.message.slice(0, 300) : "unknown error"}`)
    }
    return pending.service
  }

  /** The token source an authorization under way is for: the service's own, or its principal's. */
  private authOf(p: Pick<Pending, "scope" | "name" | "principal">): ServiceAuth | undefined {
    return p.principal === undefined ? this.serviceOf(p.scope, p.name) : this.principalOf(p.scope, p.name, p.principal)
  }

  /**
   * A principal's token source for an authorization (started now, or before, maybe before a
   * restart), as the service is now: at the URL and with the settings of the service's own token
   * source (its references expanded by its last connect), else of its definition as written.
   * Undefined when the service is gone, not remote, or no longer takes each caller's own OAuth.
   */
  principalOf(scope: Scope, name: string, principal: string): ServiceAuth | undefined {
    const definition = this.lookup(scope, name)?.getSnapshot().context.definition
    if (definition?.per_user?.oauth !== true) return undefined
    const shared = this.services.get(serviceKey(scope, name))
    if (shared !== undefined) return this.forPrincipal(scope, name, shared.url, shared.config, principal)
    const target = remoteTargetOf(definition)
    return target === undefined ? undefined : this.forPrincipal(scope, name, target.url, target.oauth, principal)
  }

  /**
   * The service's own token source for an authorization: the one its last connect made, else one
   * from its definition as written (a replica that does not run the service finishes a flow too).
   */
  private serviceOf(scope: Scope, name: string): ServiceAuth | undefined {
    const known = this.services.get(serviceKey(scope, name))
    if (known !== undefined) return known
    const definition = this.lookup(scope, name)?.getSnapshot().context.definition
    if (definition === undefined) return undefined
    const target = remoteTargetOf(definition)
    return target === undefined ? undefined : this.forService(scope, name, target.url, target.oauth, definition.per_user?.oauth === true)
  }

  /**
   * Takes an authorization under way by its `state` (once), if it is still valid: from the token
   * store, which decides who takes it (in replica mode, one replica of any number finishing it at
   * the same moment; a state started on another replica is found there). Rejects
   * `ClusterUnavailable` when the store does not answer.
   */
  async takeState(state: string): Promise<Pending | undefined> {
    const local = this.pending.get(state)
    this.forgetState(state)
    const record = await shared("taking the authorization under way", () => this.vault.takePending(state))
    // One store (a token store with nothing to read through): its memory is the copy in use, even
    // before the verifier was kept; shared ones (replica mode): only what the store gave counts.
    const taken = record ?? (this.vault.readThrough === undefined ? local : undefined)
    if (taken === undefined || taken.expiresAt <= Date.now()) return undefined
    return { service: taken.service, scope: taken.scope, name: taken.name, principal: taken.principal, startedBy: taken.startedBy, verifier: taken.verifier, redirectUri: taken.redirectUri, client: taken.client, expiresAt: taken.expiresAt }
  }

  /**
   * An authorization under way by its `state`, without taking it (this replica's, else the shared
   * token store's): what the callback shows before an authorization that asks first is finished.
   * Rejects `ClusterUnavailable` when the store does not answer.
   */
  async peekState(state: string): Promise<Pick<Pending, "scope" | "name" | "principal" | "startedBy"> | undefined> {
    const found = this.pending.get(state) ?? (await shared("reading the authorization under way", () => this.vault.findPending(state)))
    return found === undefined || found.expiresAt <= Date.now() ? undefined : { scope: found.scope, name: found.name, principal: found.principal, startedBy: found.startedBy }
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

/**
 * A step on the shared token store (replica mode: Redis, each command bounded by the client's
 * time-out): its failure is `ClusterUnavailable` (503), never taken for a refused state.
 */
const shared = <A>(what: string, step: () => Promise<A>): Promise<A> =>
  step().catch((e: unknown) => {
    throw e instanceof ClusterUnavailable ? e : ClusterUnavailable.of(what, e)
  })

/** A failed step of an authorization, with a message safe to show to the user. */
export class OAuthFlowError extends Error {
  readonly _tag = "OAuthFlowError"
  constructor(
    message: string,
    /** The field of a pasted answer the problem is about. */
    readonly field: "state" | "iss" = "state"
  ) {
    super(message)
  }
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
  /** How log lines name it: the service's key, with the principal's first characters when it is one's. */
  readonly label: string
  /** Taken out of use (`retire`): nothing is kept any more. */
  private retired = false

  constructor(
    private readonly manager: OAuthManager,
    readonly scope: Scope,
    readonly name: string,
    readonly key: string,
    readonly url: string,
    readonly config: OAuthConfig | undefined,
    /** The principal whose own token source this is (a `per_user` OAuth service); absent: the service's. */
    readonly principal?: string | undefined
  ) {
    this.label = principal === undefined ? key : `${serviceKey(scope, name)} for principal ${principalWords(principal)}`
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

  /**
   * Takes the entry the token store holds when it is not the one this source last saw (another
   * replica authorized, refreshed or deleted it; its copy follows the change messages).
   */
  private sync(): void {
    if (this.retired) return
    const stored = this.manager.vault.find(this.key)
    if (stored === this.entry) return
    const had = this.tokens !== undefined
    this.entry = stored
    this.tokens = stored?.tokens
    if (this.tokens !== undefined && (!had || this.info?.state !== "authorized")) this.publish({ required: true, state: "authorized", scopes: this.scopeList(), ...this.expiry() })
  }

  async accessToken(): Promise<string | undefined> {
    this.sync()
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
      // Another replica may have authorized (or refreshed) since this one's copy was read: read it now.
      if (this.manager.vault.readThrough !== undefined) {
        await this.manager.vault.readThrough(this.key).catch(() => undefined)
        this.sync()
      }
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
      .exclusive(this.key, async (latest, lapse) => {
        // A principal's tokens deleted meanwhile (on any replica) are not refreshed back into existence.
        if (this.principal !== undefined && latest?.tokens === undefined) {
          this.entry = latest
          this.tokens = undefined
          throw this.needsAuthorization("your authorization was deleted: authorize again")
        }
        if (latest?.tokens !== undefined && latest.tokens.access_token !== held) {
          this.entry = latest
          this.tokens = latest.tokens
          this.publish({ required: true, state: "authorized", scopes: this.scopeList(), ...this.expiry() })
          return
        }
        return this.doRenew(lapse)
      })
      .finally(() => (this.refreshing = undefined))
    return this.refreshing
  }

  /** The manager's fetch, its requests also ended by `lapse` (the refresh lock about to lapse). */
  private fetchUntil(lapse: AbortSignal | undefined): typeof fetch {
    const base = this.manager.fetch
    if (lapse === undefined) return base
    return (input, init) => base(input, { ...init, signal: init?.signal ? AbortSignal.any([init.signal, lapse]) : lapse })
  }

  private async doRenew(lapse: AbortSignal | undefined): Promise<void> {
    if (this.config?.grant_type === "client_credentials") return this.clientCredentials(lapse)
    const held = this.tokens
    const entry = this.entry
    if (held?.refresh_token === undefined || entry?.client === undefined || entry.discovery === undefined) {
      throw this.needsAuthorization("no refresh token: the upstream requires an OAuth authorization")
    }
    const sdk = await clientPackage()
    try {
      const { authorizationServerMetadata: metadata, resourceMetadata } = entry.discovery
      const fresh = await sdk.refreshAuthorization(entry.discovery.authorizationServerUrl, {
        fetchFn: this.fetchUntil(lapse),
        ...(metadata !== undefined ? { metadata } : {}),
        clientInformation: entry.client,
        refreshToken: held.refresh_token,
        ...(resourceMetadata?.resource !== undefined ? { resource: resourceMetadata.resource } : {})
      })
      if (await this.superseded(held, "done")) return
      // A server may keep the refresh token the same and leave it out of the answer.
      await this.keep({ ...fresh, refresh_token: fresh.refresh_token ?? held.refresh_token })
      log.info(`OAuth token of ${this.label} refreshed`, { event: "oauth_refreshed", service: serviceKey(this.scope, this.name) })
    } catch (e) {
      // SDK v2 reports the authorization server's refusal as an OAuthError with its code.
      if (e instanceof sdk.OAuthError && e.code === sdk.OAuthErrorCode.InvalidGrant) {
        if (await this.superseded(held, "refused (invalid_grant)")) return
        const latest = this.manager.vault.find(this.key) ?? entry
        this.tokens = undefined
        if (!this.retired) await this.manager.vault.put({ ...latest, tokens: undefined })
        if (this.principal !== undefined) {
          log.warn(`OAuth token refresh of ${this.label} refused (invalid_grant): the principal must authorize again`, { event: "oauth_refresh_failed", service: serviceKey(this.scope, this.name) })
        }
        throw this.needsAuthorization(
          this.principal === undefined
            ? "the authorization server refused the refresh token (invalid_grant): authorize the store again"
            : "the authorization server refused your refresh token (invalid_grant): authorize again"
        )
      }
      const message = `OAuth token refresh failed: ${e instanceof Error ? e.message : String(e)}`
      this.publish({ required: true, state: "refresh_failed", scopes: this.scopeList() })
      log.warn(`${this.label}: ${message}`, { event: "oauth_refresh_failed", service: serviceKey(this.scope, this.name) })
      throw new Error(message)
    }
  }

  /**
   * Whether the tokens a refresh started from were replaced while it ran (an authorization finished,
   * on any replica: a flow does not wait for the refresh lock). Then those are adopted, and what
   * the refresh got, or its refusal, leaves them alone.
   */
  private async superseded(held: Pick<OAuthTokens, "refresh_token">, outcome: string): Promise<boolean> {
    if (this.manager.vault.readThrough !== undefined) await this.manager.vault.readThrough(this.key).catch(() => undefined)
    const latest = this.manager.vault.find(this.key)?.tokens
    if (this.retired || latest === undefined || latest.refresh_token === held.refresh_token) return false
    log.info(`OAuth token refresh of ${this.label} ${outcome}, but an authorization finished meanwhile: its tokens are kept`, { event: "oauth_refresh_superseded", service: serviceKey(this.scope, this.name) })
    this.sync()
    return true
  }

  /**
   * Machine credentials: a new token from the token endpoint, through the SDK's `auth()` with a
   * provider of the store's (the SDK's `ClientCredentialsProvider` writes a console warning when no
   * issuer is known yet, which here is the first run: it binds to the one found).
   */
  private async clientCredentials(lapse: AbortSignal | undefined): Promise<void> {
    const config = this.config
    if (config?.client_id === undefined || config.client_secret === undefined) {
      throw this.needsAuthorization('"oauth" with "grant_type": "client_credentials" needs "client_id" and "client_secret"')
    }
    const issuer = this.expectedIssuer
    const client: StoredOAuthClientInformation = { client_id: config.client_id, client_secret: config.client_secret, ...(issuer !== undefined ? { issuer } : {}) }
    const scope = this.scopes
    let discovery: OAuthDiscoveryState | undefined
    let tokens: OAuthTokens | undefined
    const provider: OAuthClientProvider = {
      get redirectUrl() {
        return undefined
      },
      get clientMetadata(): OAuthClientMetadata {
        return { client_name: "mcp-store", redirect_uris: [], grant_types: ["client_credentials"], token_endpoint_auth_method: "client_secret_basic", ...(scope !== undefined ? { scope } : {}) }
      },
      clientInformation: () => client,
      tokens: () => tokens,
      saveTokens: (t) => void (tokens = t),
      redirectToAuthorization: () => undefined,
      saveCodeVerifier: () => undefined,
      codeVerifier: () => "",
      prepareTokenRequest: (s) => new URLSearchParams({ grant_type: "client_credentials", ...(s !== undefined && s !== "" ? { scope: s } : {}) }),
      saveDiscoveryState: (state) => void (discovery = state),
      discoveryState: () => discovery
    }
    const sdk = await clientPackage()
    try {
      await quietly(this.label, () => sdk.auth(provider, { serverUrl: this.url, ...this.authOptions(), fetchFn: this.fetchUntil(lapse) }))
    } catch (e) {
      // Worded as the store always did: whom the client is bound to, and whom it was not presented to.
      const why =
        e instanceof sdk.AuthorizationServerMismatchError
          ? `OAuth client information is bound to authorization server ${issuer ?? "another one"} and is not presented to ${discovery !== undefined ? issuerOf(discovery) : "the one the service names"}`
          : e instanceof Error
            ? e.message
            : String(e)
      this.publish({ required: true, state: "refresh_failed", scopes: this.scopeList() })
      throw new Error(`OAuth client credentials refused: ${why}`)
    }
    this.entry = this.entryWith(discovery)
    await this.keep(tokens as OAuthTokens)
  }

  /** Starts the authorization code flow: the URL a user opens, or already authorized. */
  async begin(redirectUri: string, startedBy?: string): Promise<{ readonly authorization_url: string } | { readonly authorized: true }> {
    if (this.config?.grant_type === "client_credentials") {
      await this.renew()
      this.manager.tell(this, { type: "AUTHORIZED" })
      return { authorized: true }
    }
    this.sync()
    let url: URL | undefined
    const provider = this.provider(redirectUri, {
      state: (client) => this.manager.newState({ service: this.key, scope: this.scope, name: this.name, principal: this.principal, startedBy, verifier: "", redirectUri, client }),
      redirect: (u) => void (url = u)
    })
    const sdk = await clientPackage()
    await quietly(this.label, () => sdk.auth(provider, { serverUrl: this.url, ...this.authOptions() }))
    if (url === undefined) throw new Error("the authorization server gave no authorization URL")
    const authorizationUrl = url.href
    this.publish({ required: true, state: "authorizing", authorization_url: authorizationUrl, scopes: this.scopeList() })
    log.info(`OAuth authorization of ${this.label} started`, { event: "oauth_authorizing", service: serviceKey(this.scope, this.name) })
    return { authorization_url: authorizationUrl }
  }

  /**
   * Whether the service's authorization server advertises RFC 9207's `iss` on its authorization
   * responses (as its metadata, kept when the authorization started, says): a code must come with it.
   */
  async sendsIss(): Promise<boolean> {
    await shared("reading the service's OAuth entry", () => this.manager.vault.readThrough?.(this.key) ?? Promise.resolve())
    this.sync()
    return this.entry?.discovery?.authorizationServerMetadata?.authorization_response_iss_parameter_supported === true
  }

  /**
   * Finishes the flow with the code the authorization server sent back (callback or pasted), and its
   * `iss`: SDK v2 checks it against the issuer of the authorization server the flow started with.
   */
  async complete(code: string, iss: string | undefined, pending: Pick<Pending, "verifier" | "redirectUri" | "client">): Promise<void> {
    // Started maybe on another replica: its registration and discovery are read as that one kept them.
    await shared("reading the service's OAuth entry", () => this.manager.vault.readThrough?.(this.key) ?? Promise.resolve())
    this.sync()
    const provider = this.provider(pending.redirectUri, { verifier: pending.verifier, client: pending.client })
    const sdk = await clientPackage()
    await quietly(this.label, () => sdk.auth(provider, { serverUrl: this.url, authorizationCode: code, ...(iss !== undefined ? { iss } : {}), ...this.authOptions() }))
    log.info(`OAuth authorization of ${this.label} done`, { event: "oauth_authorized", service: serviceKey(this.scope, this.name) })
    this.manager.tell(this, { type: "AUTHORIZED" })
  }

  /** Forgets the tokens (deleted service, new origin). */
  drop(): void {
    this.tokens = undefined
    this.entry = undefined
    this.publish(undefined)
  }

  /**
   * A principal's token source taken out of use (its tokens deleted, its service deleted or moved):
   * a refresh or authorization still under way on it keeps nothing (a deleted token never comes back).
   */
  retire(): void {
    this.retired = true
    this.drop()
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

  /**
   * The SDK's provider for the code flow: the vault for registrations and tokens. The entry's
   * registration is the one its tokens were issued to, which refreshes use: a flow for a redirect
   * URI it does not list registers a client of its own, kept with the flow (its `state`) and made
   * the entry's only with the tokens the flow gets. So a flow begun elsewhere (the terminal's
   * loopback URL after the store's callback) and never finished leaves the tokens working, and two
   * flows under way each finish with their own client.
   */
  private provider(
    redirectUri: string,
    flow: { state?: (client: StoredOAuthClientInformation | undefined) => string; redirect?: (url: URL) => void; verifier?: string; client?: StoredOAuthClientInformation | undefined }
  ): OAuthClientProvider {
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
    const preRegistered: StoredOAuthClientInformation | undefined =
      config?.client_id !== undefined
        ? { client_id: config.client_id, ...(config.client_secret !== undefined ? { client_secret: config.client_secret } : {}), ...(issuer !== undefined ? { issuer } : {}) }
        : undefined
    let state: string | undefined
    /** The registration this flow uses (undefined: the pre-registered client, or none yet). */
    let flowClient = flow.client
    return {
      get redirectUrl() {
        return redirectUri
      },
      get clientMetadata() {
        return metadata
      },
      state: () => (state = flow.state?.(flowClient) ?? ""),
      clientInformation: () => {
        if (preRegistered !== undefined) return preRegistered
        const client = this.entry?.client as { redirect_uris?: unknown } | undefined
        // A registration made for another redirect URI cannot be used with this one.
        if (flowClient === undefined && Array.isArray(client?.redirect_uris) && client.redirect_uris.includes(redirectUri)) flowClient = this.entry?.client
        return flowClient
      },
      saveClientInformation: async (client) => {
        if (this.retired) return
        flowClient = client
        // Tokens issued to another client keep it until the flow's own tokens replace them (`keep`).
        const entry = this.entry
        if (entry?.tokens !== undefined && entry.client?.client_id !== client.client_id) return
        this.entry = { ...(entry ?? this.entryWith(undefined)), client }
        await this.manager.vault.put(this.entry)
      },
      tokens: () => undefined,
      saveTokens: (tokens) => this.keep(tokens, flowClient),
      redirectToAuthorization: (url) => flow.redirect?.(url),
      saveCodeVerifier: (verifier) =>
        // The verifier joins the pending state it belongs to (single use; encrypted in the vault).
        state !== undefined ? this.manager.attachVerifier(state, verifier) : undefined,
      codeVerifier: () => flow.verifier ?? "",
      saveDiscoveryState: async (discovery) => {
        if (this.retired) return
        this.entry = { ...(this.entry ?? this.entryWith(discovery)), discovery, issuer: issuerOf(discovery) }
        await this.manager.vault.put(this.entry)
      },
      discoveryState: () => this.entry?.discovery
    }
  }

  private entryWith(discovery: OAuthDiscoveryState | undefined): VaultEntry {
    return {
      issuer: discovery !== undefined ? issuerOf(discovery) : (this.entry?.issuer ?? ""),
      scope: this.scopes ?? "",
      service: this.key,
      origin: new URL(this.url).origin,
      ...(this.entry?.client !== undefined ? { client: this.entry.client } : {}),
      discovery: discovery ?? this.entry?.discovery
    }
  }

  /** Keeps new tokens (memory and vault), with the client a flow got them as, and shows the service authorized. */
  private async keep(tokens: OAuthTokens, client?: StoredOAuthClientInformation): Promise<void> {
    if (this.retired) return
    this.tokens = { ...tokens, obtained_at: Date.now() }
    this.entry = { ...(this.entry ?? this.entryWith(undefined)), ...(client !== undefined ? { client } : {}), tokens: this.tokens }
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
  /** With a pasted code: the `iss` that came with it (RFC 9207), required when the authorization server sends it. */
  readonly iss?: string | undefined
}

/**
 * authorize_service: with `code` and `state`, finishes the service's authorization (paste-the-code);
 * otherwise starts it and answers the URL to open (or `authorized` at once for machine credentials).
 * With `principal` (POST .../credentials/{service_name}/authorize of a `per_user` OAuth service), the
 * same for that principal alone: its state bound to it, its tokens kept for it. `startedBy` (who
 * started it, in words) makes the store's callback ask the person in the browser before it
 * finishes (a principal's own authorization, or a service's started by a key not an admin's).
 */
export const authorizeUpstream = (
  ctx: ScopeContext,
  oauth: OAuthManager,
  input: AuthorizeInput,
  principal?: string,
  startedBy?: string
): Effect.Effect<
  { readonly service_name: string; readonly state: "authorizing" | "authorized"; readonly authorization_url?: string },
  ServiceNotFound | ValidationError | UpstreamError | TooMany | ClusterUnavailable
> =>
  Effect.gen(function* () {
    const actor = yield* ctx.service(input.service_name)
    const { name, definition } = actor.getSnapshot().context
    if (principal !== undefined && definition.per_user?.oauth !== true) {
      return yield* Effect.fail(
        ValidationError.of([{ field: "service_name", problem: `service '${name}' is not authorized by each caller (its definition has no per_user.oauth): POST authorize_service authorizes it for everyone` }])
      )
    }
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
    if (input.iss !== undefined && input.code === undefined) {
      return yield* Effect.fail(ValidationError.of([{ field: "iss", problem: "iss comes with a pasted code and state" }]))
    }
    // The token source its last connect made (with its references expanded), else one from the definition, expanded here.
    const target = remoteTargetOf(definition)
    const service =
      principal !== undefined
        ? oauth.principalOf(ctx.scope, name, principal)
        : (oauth.connected(ctx.scope, name) ?? (target === undefined ? undefined : oauth.forService(ctx.scope, name, target.url, target.oauth, definition.per_user?.oauth === true)))
    if (service === undefined) return yield* Effect.fail(ValidationError.of([{ field: "service_name", problem: "the service's definition is not usable: fix it first" }]))
    if (input.code !== undefined && input.state !== undefined) {
      const { code, state, iss } = input
      yield* Effect.tryPromise({
        try: () => oauth.finish({ code, state, iss }, { scope: ctx.scope, name, principal }),
        catch: (e) => {
          if (e instanceof ClusterUnavailable) {
            log.warn(`pasted OAuth code for ${service.label} not taken: ${e.message}`, { event: "oauth_failed", service: serviceKey(ctx.scope, name) })
            return e
          }
          const problem = e instanceof OAuthFlowError ? e.message : "the authorization could not be finished"
          log.warn(`pasted OAuth code for ${service.label} refused: ${problem}`, { event: "oauth_failed", service: serviceKey(ctx.scope, name) })
          return ValidationError.of([{ field: e instanceof OAuthFlowError ? e.field : "state", problem }])
        }
      })
      return { service_name: name, state: "authorized" as const }
    }
    const callback = oauth.callbackUrl()
    const redirect = input.redirect_uri ?? callback
    const problem = redirect === undefined ? "the store has no callback URL yet: give one" : redirectProblem(redirect, callback)
    if (redirect === undefined || problem !== undefined) return yield* Effect.fail(ValidationError.of([{ field: "redirect_uri", problem: problem as string }]))
    // Bounded: a service keeps the own tokens of at most so many principals (an authorized one may always authorize again).
    if (principal !== undefined && oauth.vault.find(principalKey(ctx.scope, name, principal)) === undefined && oauth.principalCount(ctx.scope, name) >= MAX_PRINCIPAL_AUTHORIZATIONS) {
      log.warn(`refused an OAuth authorization of ${service.label}: the service has the most principals' authorizations`, { event: "oauth_failed", service: serviceKey(ctx.scope, name) })
      return yield* Effect.fail(
        new TooMany({ message: `Service '${name}' keeps the authorizations of the most principals it may`, limit: "per_user_principals", max: MAX_PRINCIPAL_AUTHORIZATIONS, retryAfterSeconds: 60 })
      )
    }
    const started = yield* Effect.tryPromise({
      try: () => service.begin(redirect, startedBy),
      catch: (e) => {
        if (e instanceof ClusterUnavailable) {
          log.warn(`OAuth authorization of ${service.label} could not start: ${e.message}`, { event: "oauth_failed", service: serviceKey(ctx.scope, name) })
          return e
        }
        log.warn(`OAuth authorization of ${service.label} could not start: ${e instanceof Error ? e.message.slice(0, 500) : "unknown error"}`, { event: "oauth_failed", service: serviceKey(ctx.scope, name) })
        return new UpstreamError({
          message: `the OAuth authorization of '${name}' could not start: ${e instanceof Error ? e.message.slice(0, 500) : "unknown error"}`,
          outcome: "transport_error",
          serviceName: name,
          code: undefined
        })
      }
    })
    return "authorization_url" in started
      ? { service_name: name, state: "authorizing" as const, authorization_url: started.authorization_url }
      : { service_name: name, state: "authorized" as const }
  })
