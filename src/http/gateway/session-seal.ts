/**
 * Sealed MCP session ids (docs/sessions.md): the `Mcp-Session-Id` the store hands out at initialize
 * is an AES-256-GCM encryption (node:crypto) of what the session needs to be rebuilt by a store that
 * has never seen it (another replica, the same store after a restart): its scope, the negotiated
 * protocol version, the client's capabilities and info (bounded), who opened it (a digest of the
 * API key and its role) and when. Only a holder of the key can make or read one; a changed byte
 * fails the GCM tag. The task ids the store hands its MCP clients (the tasks extension) are sealed
 * the same way, with their own prefix and associated data: neither kind of id opens as the other.
 *
 * The key is an HKDF sub-key (info "mcp-session") of one secret: in one process MCPSTORE_SECRET_KEY
 * or the key file beside the services file (`storeSecret`, shared with the OAuth token file); a
 * cluster passes its own secret (`StartServerOptions.sessionSecret`) so every replica shares it.
 */
import { createCipheriv, createDecipheriv, createHash, hkdfSync, randomBytes } from "node:crypto"
import {
  LATEST_PROTOCOL_VERSION,
  SUPPORTED_PROTOCOL_VERSIONS,
  type ClientCapabilities,
  type Implementation,
  type InitializeRequest
} from "@modelcontextprotocol/server"
import { agentIdProblem, agentScope, STORE_SCOPE, type Scope } from "../../domain/service-definition.js"
import type { Principal } from "../../config/api-keys.js"
import { keyFileOf, storeSecret } from "../../config/token-vault.js"

/**
 * What a task id of the store's carries (the tasks extension, src/http/gateway/modern.ts): whose it
 * is (scope and key), the service and the upstream's own task id it stands for, the store's entry
 * that records its call (src/runtime/task-relay.ts) and when it was made.
 */
export interface TaskClaims {
  readonly scope: Scope
  readonly owner: string
  readonly service: string
  readonly upstreamTaskId: string
  readonly relay: string
  /** The replica that handed it out (replica mode), which records its call. */
  readonly holder?: string | undefined
  readonly issuedAt: number
}

/** What a sealed id carries. */
export interface SessionClaims {
  readonly scope: Scope
  /** The protocol version the server answered at initialize. */
  readonly protocolVersion: string
  readonly capabilities: ClientCapabilities
  readonly clientInfo: Implementation
  /** Who opened the session (`sessionOwner`): only the same key may use it. */
  readonly owner: string
  /** When the id was sealed (ms since the epoch). */
  readonly issuedAt: number
}

/** The prefix of a sealed id (its format's version). */
const PREFIX = "s1."
const ALGORITHM = "aes-256-gcm"
const IV_BYTES = 12
const TAG_BYTES = 16
/** Authenticated with every id: an id sealed for something else under the same key does not open. */
const AAD = Buffer.from("mcp-store/mcp-session/v1")
/** A task id's prefix and associated data. */
const TASK_PREFIX = "t1."
const TASK_AAD = Buffer.from("mcp-store/mcp-task/v1")

/** Longest `Mcp-Session-Id` opened at all (a longer one is refused before any work). */
export const MAX_SESSION_ID_LENGTH = 4096
/** Longest capabilities object sealed whole (JSON characters); a larger one keeps its top-level names only. */
export const MAX_SEALED_CAPABILITIES = 1024
/** Top-level capability names kept when the object is too large. */
const MAX_CAPABILITY_NAMES = 16
/** Longest client name, version or title kept. */
export const MAX_CLIENT_INFO_TEXT = 128

const cut = (text: unknown, max: number): string | undefined => (typeof text === "string" ? text.slice(0, max) : undefined)

/**
 * The client's facts of an initialize request, bounded: the version the server negotiates (as the
 * SDK's Server does), the capabilities (whole up to MAX_SEALED_CAPABILITIES characters of JSON,
 * else each top-level name with an empty object: sampling, elicitation, roots still known) and the
 * client's name, version and title (each cut to MAX_CLIENT_INFO_TEXT).
 */
export const clientFacts = (params: InitializeRequest["params"]): Pick<SessionClaims, "protocolVersion" | "capabilities" | "clientInfo"> => {
  const requested = params.protocolVersion
  const protocolVersion = SUPPORTED_PROTOCOL_VERSIONS.includes(requested) ? requested : LATEST_PROTOCOL_VERSION
  const whole = JSON.stringify(params.capabilities ?? {})
  const capabilities: ClientCapabilities =
    whole.length <= MAX_SEALED_CAPABILITIES
      ? (JSON.parse(whole) as ClientCapabilities)
      : Object.fromEntries(
          Object.keys(params.capabilities)
            .slice(0, MAX_CAPABILITY_NAMES)
            .map((name) => [name.slice(0, 64), {}])
        )
  const info = params.clientInfo
  const title = cut(info.title, MAX_CLIENT_INFO_TEXT)
  const clientInfo: Implementation = {
    name: cut(info.name, MAX_CLIENT_INFO_TEXT) ?? "",
    version: cut(info.version, MAX_CLIENT_INFO_TEXT) ?? "",
    ...(title !== undefined ? { title } : {})
  }
  return { protocolVersion, capabilities, clientInfo }
}

/**
 * Who a session belongs to: a digest of the principal's role (and agent) and of the bearer key the
 * request carried (none when the server needs no key). A request of the session with another key
 * is refused as an unknown session. Only the digest is kept (and sealed), never the key. An access
 * token is renewed while its session lasts: a session opened with one belongs to the token's issuer
 * and subject (`Principal.subject`), not to the token.
 */
export const sessionOwner = (principal: Principal, authorization: string | undefined): string => {
  const key = principal.subject !== undefined ? `token\0${principal.subject}` : (/^Bearer\s+(.+)$/i.exec(authorization ?? "")?.[1]?.trim() ?? "")
  const who = principal.role === "agent" ? `agent\0${principal.agentId}` : principal.role
  const text = `mcp-session-owner\0${who}\0${key}`
  // Most requests come with the key of the one before: its digest is kept (one entry, no table of keys).
  if (lastOwner.text !== text) lastOwner = { text, owner: createHash("sha256").update(text).digest().subarray(0, 16).toString("base64url") }
  return lastOwner.owner
}
let lastOwner = { text: "", owner: "" }

/**
 * What an id is remembered by once its session ended: its IV (16 characters), random and never
 * reused, so unique to the id (only the canonical spelling of an id opens: `SessionSeal.open`).
 */
export const sealedIdKey = (id: string): string => id.slice(PREFIX.length, PREFIX.length + 16)

/**
 * A random IV (GCM needs one never used before with the key, which every replica shares: random, not
 * a counter), taken from a batch of random bytes as node:crypto's randomUUID does: one call into
 * OpenSSL per 512 sessions instead of one per session.
 */
let ivPool = Buffer.alloc(0)
let ivAt = 0
const freshIv = (): Buffer => {
  if (ivAt + IV_BYTES > ivPool.length) {
    ivPool = randomBytes(IV_BYTES * 512)
    ivAt = 0
  }
  ivAt += IV_BYTES
  return ivPool.subarray(ivAt - IV_BYTES, ivAt)
}

/** Seals and opens session ids with one key. */
export class SessionSeal {
  private constructor(private readonly key: Buffer) {}

  /** The seal of a secret (any text or bytes): its HKDF-SHA256 sub-key with info "mcp-session". */
  static fromSecret(secret: string | Uint8Array): SessionSeal {
    if (secret.length === 0) throw new Error("the MCP session secret is empty")
    return new SessionSeal(Buffer.from(hkdfSync("sha256", secret, "mcp-store", "mcp-session", 32)))
  }

  /** A session id for these claims (visible ASCII, as MCP wants of a session id). */
  seal(claims: SessionClaims): string {
    return this.encrypt(PREFIX, AAD, {
      s: claims.scope.kind === "store" ? null : claims.scope.agentId,
      p: claims.protocolVersion,
      c: claims.capabilities,
      i: claims.clientInfo,
      o: claims.owner,
      t: claims.issuedAt
    })
  }

  /** The claims of an id sealed with this key, or undefined (not an id, another key, changed, too long). */
  open(id: string): SessionClaims | undefined {
    return claimsOf(this.decrypt(PREFIX, AAD, id))
  }

  /** A task id of the store's for these claims (visible ASCII; never opens as a session id, nor the reverse). */
  sealTask(claims: TaskClaims): string {
    return this.encrypt(TASK_PREFIX, TASK_AAD, {
      s: claims.scope.kind === "store" ? null : claims.scope.agentId,
      o: claims.owner,
      v: claims.service,
      u: claims.upstreamTaskId,
      r: claims.relay,
      ...(claims.holder !== undefined ? { h: claims.holder } : {}),
      t: claims.issuedAt
    })
  }

  /** The claims of a task id sealed with this key, or undefined. */
  openTask(id: string): TaskClaims | undefined {
    return taskClaimsOf(this.decrypt(TASK_PREFIX, TASK_AAD, id))
  }

  private encrypt(prefix: string, aad: Buffer, value: unknown): string {
    const iv = freshIv()
    const cipher = createCipheriv(ALGORITHM, this.key, iv, { authTagLength: TAG_BYTES }).setAAD(aad)
    const data = Buffer.concat([cipher.update(JSON.stringify(value), "utf8"), cipher.final()])
    return prefix + Buffer.concat([iv, data, cipher.getAuthTag()]).toString("base64url")
  }

  /** The JSON sealed in `id`, or undefined. */
  private decrypt(prefix: string, aad: Buffer, id: string): unknown {
    if (id.length > MAX_SESSION_ID_LENGTH || !id.startsWith(prefix)) return undefined
    const text = id.slice(prefix.length)
    const raw = Buffer.from(text, "base64url")
    // Only the one spelling `seal` writes: base64url's unused trailing bits (or stray characters)
    // would otherwise give one session several ids, each a key of its own in the gateway's maps.
    if (raw.length <= IV_BYTES + TAG_BYTES || raw.toString("base64url") !== text) return undefined
    try {
      const decipher = createDecipheriv(ALGORITHM, this.key, raw.subarray(0, IV_BYTES), { authTagLength: TAG_BYTES }).setAAD(aad)
      decipher.setAuthTag(raw.subarray(raw.length - TAG_BYTES))
      return JSON.parse(Buffer.concat([decipher.update(raw.subarray(IV_BYTES, raw.length - TAG_BYTES)), decipher.final()]).toString("utf8"))
    } catch {
      return undefined
    }
  }
}

/** The claims of a decrypted task id. */
const taskClaimsOf = (v: unknown): TaskClaims | undefined => {
  if (typeof v !== "object" || v === null) return undefined
  const o = v as Record<string, unknown>
  const scope = o["s"] === null ? STORE_SCOPE : typeof o["s"] === "string" && agentIdProblem(o["s"]) === undefined ? agentScope(o["s"]) : undefined
  if (scope === undefined || typeof o["o"] !== "string" || typeof o["v"] !== "string" || typeof o["u"] !== "string" || typeof o["r"] !== "string" || typeof o["t"] !== "number") return undefined
  return { scope, owner: o["o"], service: o["v"], upstreamTaskId: o["u"], relay: o["r"], ...(typeof o["h"] === "string" ? { holder: o["h"] } : {}), issuedAt: o["t"] }
}

/** The claims of a decrypted id: only ever what `seal` wrote, checked anyway (an older format, a bug). */
const claimsOf = (v: unknown): SessionClaims | undefined => {
  if (typeof v !== "object" || v === null) return undefined
  const o = v as Record<string, unknown>
  const scope = o["s"] === null ? STORE_SCOPE : typeof o["s"] === "string" && agentIdProblem(o["s"]) === undefined ? agentScope(o["s"]) : undefined
  const info = o["i"] as Record<string, unknown> | null
  if (scope === undefined || typeof o["p"] !== "string" || typeof o["o"] !== "string" || typeof o["t"] !== "number") return undefined
  if (typeof o["c"] !== "object" || o["c"] === null || typeof info !== "object" || info === null || typeof info["name"] !== "string" || typeof info["version"] !== "string") return undefined
  return { scope, protocolVersion: o["p"], capabilities: o["c"] as ClientCapabilities, clientInfo: info as unknown as Implementation, owner: o["o"], issuedAt: o["t"] }
}

/**
 * Where a gateway gets its seal: `get(create)` resolves to the seal, or undefined when there is no
 * secret yet and `create` is false (no id can be valid then). Loaded once, on first use.
 */
export type SealSource = (create: boolean) => Promise<SessionSeal | undefined>

/** A source that always has this secret (a cluster's, a test's). */
export const fixedSealSource = (secret: string | Uint8Array): SealSource => {
  const seal = SessionSeal.fromSecret(secret)
  return async () => seal
}

/**
 * The seal of one store process: the store's secret (`storeSecret`: MCPSTORE_SECRET_KEY, else the
 * key file beside the services file, created at the first session). Another store on the same
 * services file (or the same one restarted) opens the same ids.
 */
export const storeSealSource = (servicesFile: string): SealSource => {
  let seal: SessionSeal | undefined
  return async (create) => {
    if (seal === undefined) {
      // Two first sessions at once both read the file: the one written first (O_EXCL) is the key.
      const secret = await storeSecret(keyFileOf(servicesFile), create)
      seal ??= secret && SessionSeal.fromSecret(secret.secret)
    }
    return seal
  }
}
