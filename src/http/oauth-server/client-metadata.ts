/**
 * Client ID Metadata Documents (the MCP authorization spec's way to know a client without
 * registering it): the client id is an https URL, and the document found there names the client
 * and its redirect URIs. Fetched only through the store's outbound policy (metadata addresses
 * refused, `--upstream-allow` honoured), no redirect followed, at most 16 KiB in 5 s, then checked
 * and kept in a bounded cache. A hostile client id cannot make the store fetch what it may not, nor
 * hold memory. A failed fetch is told to the requester in general words only (the upstream's
 * status or network error goes to the log), and kept a while: a client id cannot be used to probe
 * addresses and ports the store reaches, nor to make it fetch on every request.
 */
import type { JWK } from "jose"
import { log } from "../../logging/log.js"
import { oauthFetch } from "../../mcp/oauth-client.js"
import { UpstreamRefused, type UpstreamPolicy } from "../../mcp/upstream-policy.js"

/** A checked metadata document, what the server keeps of it. */
export interface ClientMetadata {
  readonly client_id: string
  readonly client_name: string | null
  readonly redirect_uris: ReadonlyArray<string>
  readonly token_endpoint_auth_method: "none" | "private_key_jwt"
  /** The client's public keys (`jwks` in the document), for `private_key_jwt`. */
  readonly jwks: ReadonlyArray<JWK> | null
}

/** Why a client id or its document is refused: the text goes into an OAuth error description. */
export class ClientMetadataError extends Error {
  override readonly name = "ClientMetadataError"
}

const MAX_DOCUMENT_BYTES = 16 * 1024
const FETCH_MS = 5_000
const MAX_CACHED = 500
const DEFAULT_TTL_MS = 5 * 60_000
const MIN_TTL_MS = 60_000
const MAX_TTL_MS = 60 * 60_000
/** How long a failure (fetch or document) is kept before the document is fetched again. */
const FAILURE_TTL_MS = 30_000
/** At most one fetch per client this often to read a kept document again (`refetch`). */
const REFETCH_MS = 30_000
const MAX_REDIRECT_URIS = 20
const MAX_KEYS = 10
/** Documents fetched at once: a flood of made-up client ids cannot make the store open connections without end. */
const MAX_IN_FLIGHT = 16

/** Whether a host (as in a URL, IPv6 in brackets) is a loopback address. */
export const isLoopbackHost = (hostname: string): boolean => {
  const h = hostname.toLowerCase().replace(/^\[|\]$/g, "")
  return h === "localhost" || h === "::1" || /^127\.\d+\.\d+\.\d+$/.test(h)
}

/**
 * Why `clientId` cannot be a client id URL, or undefined when it can: https with a path, no
 * fragment, no credentials, no dot segment; http only on a loopback address and with
 * `devLoopback` (`--auth-dev-loopback-clients`).
 */
export const clientIdProblem = (clientId: string, devLoopback: boolean): string | undefined => {
  if (clientId.length > 2048) return "the client id is longer than 2048 characters"
  let url: URL
  try {
    url = new URL(clientId)
  } catch {
    return "the client id is not a URL"
  }
  if (url.protocol === "http:") {
    if (!devLoopback || !isLoopbackHost(url.hostname)) return "the client id must be an https URL (http only on a loopback address with --auth-dev-loopback-clients)"
  } else if (url.protocol !== "https:") return "the client id must be an https URL"
  if (url.pathname === "/" || url.pathname === "") return "the client id URL must have a path"
  if (url.hash !== "" || clientId.includes("#")) return "the client id URL may not have a fragment"
  if (url.username !== "" || url.password !== "") return "the client id URL may not hold credentials"
  if (/\/\.\.?(\/|$)/.test(clientId.replace(/[?].*$/, ""))) return "the client id URL may not have dot segments"
  if (url.href !== clientId) return "the client id URL must be written in its normal form"
  return undefined
}

/** Why a redirect URI is refused: https, http on loopback, or a private scheme with a dot (com.example.app:/cb). */
export const redirectUriProblem = (uri: unknown): string | undefined => {
  if (typeof uri !== "string" || uri.length > 2048) return "a redirect URI must be a string of at most 2048 characters"
  let url: URL
  try {
    url = new URL(uri)
  } catch {
    return `the redirect URI ${JSON.stringify(uri.slice(0, 200))} is not an absolute URL`
  }
  if (url.hash !== "" || uri.includes("#")) return "a redirect URI may not have a fragment"
  if (url.protocol === "https:") return undefined
  if (url.protocol === "http:") return isLoopbackHost(url.hostname) ? undefined : "an http redirect URI must be on a loopback address"
  if (/^[a-z][a-z0-9+-]*\.[a-z0-9+.-]+:$/.test(url.protocol)) return undefined
  return `the redirect URI scheme ${url.protocol} is not allowed (https, http on loopback, or a private scheme such as com.example.app:)`
}

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v)

/** The checked document, or why it is refused. */
export const checkClientMetadata = (clientId: string, raw: unknown): ClientMetadata => {
  if (!isRecord(raw)) throw new ClientMetadataError("the client metadata document is not a JSON object")
  if (raw["client_id"] !== clientId) throw new ClientMetadataError("the client metadata document's client_id is not the URL it was fetched from")
  const uris = raw["redirect_uris"]
  if (!Array.isArray(uris) || uris.length === 0 || uris.length > MAX_REDIRECT_URIS) throw new ClientMetadataError(`the client metadata document must list 1 to ${MAX_REDIRECT_URIS} redirect_uris`)
  for (const uri of uris) {
    const problem = redirectUriProblem(uri)
    if (problem !== undefined) throw new ClientMetadataError(problem)
  }
  const name = raw["client_name"]
  if (name !== undefined && (typeof name !== "string" || name.length > 200)) throw new ClientMetadataError("client_name must be a string of at most 200 characters")
  const method = raw["token_endpoint_auth_method"] ?? "none"
  if (method !== "none" && method !== "private_key_jwt") {
    throw new ClientMetadataError("token_endpoint_auth_method must be none or private_key_jwt (a metadata document cannot carry a shared secret)")
  }
  let jwks: ReadonlyArray<JWK> | null = null
  if (raw["jwks"] !== undefined) {
    const set = raw["jwks"]
    if (!isRecord(set) || !Array.isArray(set["keys"]) || set["keys"].length === 0 || set["keys"].length > MAX_KEYS || !set["keys"].every(isRecord)) {
      throw new ClientMetadataError(`jwks must be a JSON Web Key Set of 1 to ${MAX_KEYS} keys`)
    }
    if ((set["keys"] as Array<Record<string, unknown>>).some((k) => "d" in k)) throw new ClientMetadataError("jwks may not hold a private key")
    jwks = set["keys"] as ReadonlyArray<JWK>
  }
  if (method === "private_key_jwt" && jwks === null) throw new ClientMetadataError("private_key_jwt needs the client's keys in the document's jwks (jwks_uri is not supported)")
  return { client_id: clientId, client_name: typeof name === "string" ? name : null, redirect_uris: uris as ReadonlyArray<string>, token_endpoint_auth_method: method, jwks }
}

/** How long a fetched document is kept: its `Cache-Control: max-age`, within 1 min .. 1 h (5 min without one). */
const ttlOf = (cacheControl: string | null): number => {
  const m = cacheControl === null ? null : /(?:^|,)\s*max-age=(\d{1,9})\s*(?:,|$)/i.exec(cacheControl)
  if (m === null) return DEFAULT_TTL_MS
  return Math.min(MAX_TTL_MS, Math.max(MIN_TTL_MS, Number(m[1]) * 1000))
}

/** Fetches and caches client metadata documents (one fetch at a time per client id). */
export class ClientMetadataCache {
  private readonly cached = new Map<string, { readonly doc: ClientMetadata; readonly until: number }>()
  private readonly failed = new Map<string, { readonly error: ClientMetadataError; readonly until: number }>()
  /** When each client's document was last read again by `refetch`. */
  private readonly refetched = new Map<string, number>()
  private readonly inFlight = new Map<string, Promise<ClientMetadata>>()
  private readonly fetch: typeof fetch

  constructor(
    policy: UpstreamPolicy,
    private readonly devLoopback: boolean,
    private readonly now: () => number = Date.now
  ) {
    this.fetch = oauthFetch(policy, { maxBytes: MAX_DOCUMENT_BYTES, timeoutMs: FETCH_MS })
  }

  /** The checked document of `clientId`; throws `ClientMetadataError` (refused id, failed fetch, bad document). */
  get(clientId: string): Promise<ClientMetadata> {
    const problem = clientIdProblem(clientId, this.devLoopback)
    if (problem !== undefined) return Promise.reject(new ClientMetadataError(problem))
    const hit = this.cached.get(clientId)
    if (hit !== undefined && hit.until > this.now()) return Promise.resolve(hit.doc)
    const failure = this.failed.get(clientId)
    if (failure !== undefined && failure.until > this.now()) return Promise.reject(failure.error)
    const running = this.inFlight.get(clientId)
    if (running !== undefined) return running
    if (this.inFlight.size >= MAX_IN_FLIGHT) return Promise.reject(new ClientMetadataError(`${MAX_IN_FLIGHT} client metadata documents are being fetched already; try again shortly`))
    const fetched = this.load(clientId)
      .catch((e: unknown) => {
        if (e instanceof ClientMetadataError) keep(this.failed, clientId, { error: e, until: this.now() + FAILURE_TTL_MS })
        throw e
      })
      .finally(() => this.inFlight.delete(clientId))
    this.inFlight.set(clientId, fetched)
    return fetched
  }

  /**
   * The document fetched again (a client whose keys changed since it was kept), or undefined when
   * this client's was read again less than `REFETCH_MS` ago or could not be read now. The kept
   * document is replaced only by one read and checked: anyone can ask for a refetch (an assertion
   * naming an unknown key), and a failed one must not take a client's good document away.
   */
  async refetch(clientId: string): Promise<ClientMetadata | undefined> {
    const last = this.refetched.get(clientId)
    if (last !== undefined && last + REFETCH_MS > this.now()) return undefined
    keep(this.refetched, clientId, this.now())
    if (clientIdProblem(clientId, this.devLoopback) !== undefined || this.inFlight.size >= MAX_IN_FLIGHT) return undefined
    return this.load(clientId).catch(() => undefined)
  }

  private async load(clientId: string): Promise<ClientMetadata> {
    let response: Response
    try {
      response = await this.fetch(clientId, { headers: { accept: "application/json" }, redirect: "manual" })
    } catch (e) {
      // The store's own refusal (its outbound policy) is said; what the network answered is not.
      if (e instanceof UpstreamRefused) throw new ClientMetadataError(`the client metadata document could not be fetched: ${e.message.slice(0, 200)}`)
      const cause = e instanceof Error && e.cause instanceof Error ? ` (${e.cause.message})` : ""
      throw unfetched(clientId, `${e instanceof Error ? e.message : String(e)}${cause}`)
    }
    if (response.status !== 200) {
      await response.body?.cancel().catch(() => undefined)
      throw unfetched(clientId, `HTTP ${response.status}`)
    }
    let raw: unknown
    try {
      raw = JSON.parse(await response.text())
    } catch (e) {
      throw new ClientMetadataError(`the client metadata document is not JSON of at most ${MAX_DOCUMENT_BYTES} bytes${e instanceof Error && /large|limit/i.test(e.message) ? " (too large)" : ""}`)
    }
    const doc = checkClientMetadata(clientId, raw)
    this.failed.delete(clientId)
    keep(this.cached, clientId, { doc, until: this.now() + ttlOf(response.headers.get("cache-control")) })
    return doc
  }
}

/** Sets an entry as the newest; the oldest go first past MAX_CACHED. */
const keep = <V>(map: Map<string, V>, key: string, value: V): void => {
  map.delete(key)
  map.set(key, value)
  while (map.size > MAX_CACHED) map.delete(map.keys().next().value as string)
}

/** A failed fetch: the detail to the log only, general words to the requester. */
const unfetched = (clientId: string, detail: string): ClientMetadataError => {
  // The id is not known good: quoted, so a line break in it cannot forge a log line.
  log.warn(`the client metadata document of ${JSON.stringify(clientId.slice(0, 200))} could not be fetched: ${detail.slice(0, 200)}`, { event: "oauth_client_metadata_unfetched", client_id: clientId.slice(0, 200) })
  return new ClientMetadataError("the client metadata document could not be fetched")
}
