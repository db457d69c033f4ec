/**
 * Who may reach the store through a browser. A store that starts programs on request is a target
 * for any web page the user opens (docs/api.md, Conventions): a page can send "simple"
 * cross-origin requests, and a DNS-rebinding page can make the browser treat the store as its own
 * origin. So every request, on every route, is checked here before it is routed:
 *
 * - `Host` must name the store: `localhost`, `127.0.0.1` or `[::1]` with the listen port, the
 *   listen address itself (when not a wildcard; with a wildcard, any address of this machine's
 *   interfaces: an IP literal cannot be rebound), or a name given with `--allowed-hosts` (or the
 *   host of `--public-url`).
 *   Otherwise 403 `FORBIDDEN_HOST`.
 * - `Origin`, when sent, must be the request's own origin (its authority equal to the allowed
 *   `Host`) or one given with `--allowed-origins`. Otherwise 403 `FORBIDDEN_ORIGIN`, with no CORS
 *   header. A browser request without `Origin` but marked cross-site by `Sec-Fetch-Site` (an
 *   `<img>` or `<script>` GET) is refused the same way, except a top-level navigation.
 * - An allowed foreign origin gets CORS answers (a preflight, `Access-Control-Allow-Origin`), so a
 *   dashboard served elsewhere can use the API.
 *
 * Also here: whether a request comes from a loopback client, which decides whether it may define
 * local (command) services when the store listens on the network without an API key.
 */
import * as HttpApp from "@effect/platform/HttpApp"
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import { Context, Effect, Option } from "effect"
import { isIP } from "node:net"
import { networkInterfaces } from "node:os"
import type { ServerOptions } from "../config/options.js"
import type { LocalServicesPolicy } from "../runtime/scope.js"
import { errorBody } from "./contract-errors.js"

/** Whether a listen address is a wildcard (every interface). */
export const isWildcard = (host: string): boolean => host === "0.0.0.0" || host === "::" || host === "[::]"

/** Whether an address (a listen address or a client's) is loopback. */
export const isLoopback = (address: string): boolean => {
  const a = address.toLowerCase().replace(/^\[|\]$/g, "")
  return a === "localhost" || a === "::1" || a.startsWith("127.") || a.startsWith("::ffff:127.")
}

/** `host[:port]` split; the host lower-cased, an IPv6 literal kept in brackets. Undefined when malformed. */
const splitAuthority = (authority: string): { readonly host: string; readonly port: string | undefined } | undefined => {
  const a = authority.trim().toLowerCase()
  if (a === "") return undefined
  if (a.startsWith("[")) {
    const end = a.indexOf("]")
    if (end === -1) return undefined
    const rest = a.slice(end + 1)
    if (rest !== "" && !/^:\d{1,5}$/.test(rest)) return undefined
    return { host: a.slice(0, end + 1), port: rest === "" ? undefined : rest.slice(1) }
  }
  const parts = a.split(":")
  if (parts.length > 2) return undefined
  const [host, port] = parts as [string, string | undefined]
  if (host === "" || (port !== undefined && !/^\d{1,5}$/.test(port))) return undefined
  return { host, port }
}

/** An address as it appears in a Host header: IPv6 in brackets. */
const hostForm = (address: string): string => (isIP(address) === 6 ? `[${address.toLowerCase()}]` : address.toLowerCase())

/** The addresses of this machine's interfaces, in Host form. Read when needed: interfaces change. */
const interfaceAddresses = (): ReadonlySet<string> =>
  new Set(
    Object.values(networkInterfaces())
      .flatMap((list) => list ?? [])
      .map((i) => hostForm(i.address.replace(/%.*$/, "")))
  )

export interface RequestPolicy {
  /** Why a request's Host is refused, or undefined when allowed. */
  readonly hostProblem: (host: string | undefined) => string | undefined
  /** Why a request's Origin is refused, or undefined when allowed; `host` is the (allowed) Host. */
  readonly originProblem: (origin: string, host: string) => string | undefined
  /** Whether an allowed origin is foreign (not the request's own), so CORS headers are due. */
  readonly isForeign: (origin: string, host: string) => boolean
}

/** The Host and Origin rules for a server; `port` is read per request (it is known once listening). */
export const requestPolicy = (options: Pick<ServerOptions, "host" | "allowedHosts" | "allowedOrigins" | "publicUrl">, port: () => number): RequestPolicy => {
  const anyHost = options.allowedHosts.includes("*")
  // The name of `--public-url` is the store's own (the proxy in front passes it on), as if given with --allowed-hosts.
  const publicHost = options.publicUrl === undefined ? [] : [new URL(options.publicUrl).host]
  const extraHosts = [...options.allowedHosts, ...publicHost].map(splitAuthority).filter((a) => a !== undefined)
  const anyOrigin = options.allowedOrigins.includes("*")
  const extraOrigins = new Set(options.allowedOrigins.filter((o) => o !== "*").map((o) => normalizeOrigin(o)))
  const listen = isWildcard(options.host) ? undefined : hostForm(options.host.replace(/^\[|\]$/g, ""))
  const ownName = (host: string) => host === "localhost" || host === "127.0.0.1" || host === "[::1]" || host === listen

  const hostProblem = (header: string | undefined): string | undefined => {
    if (header === undefined || header === "") return "the request has no Host header"
    const authority = splitAuthority(header)
    if (authority === undefined) return `the Host header '${header.slice(0, 100)}' is malformed`
    if (anyHost) return undefined
    const samePort = authority.port === String(port())
    if (samePort && ownName(authority.host)) return undefined
    if (samePort && listen === undefined && isIP(authority.host.replace(/^\[|\]$/g, "")) !== 0 && interfaceAddresses().has(authority.host)) return undefined
    for (const extra of extraHosts) {
      if (extra.host === authority.host && (extra.port === undefined || extra.port === authority.port)) return undefined
    }
    return `the Host '${header.slice(0, 100)}' is not one of this store's names (add it with --allowed-hosts)`
  }

  const isForeign = (origin: string, host: string): boolean => {
    const o = parseOrigin(origin)
    return o === undefined || o.authority !== host.trim().toLowerCase()
  }

  const originProblem = (origin: string, host: string): string | undefined => {
    if (!isForeign(origin, host)) return undefined
    if (anyOrigin || extraOrigins.has(normalizeOrigin(origin))) return undefined
    return `the Origin '${origin.slice(0, 200)}' may not use this store (add it with --allowed-origins)`
  }

  return { hostProblem, originProblem, isForeign }
}

/** An origin's scheme and authority (`host[:port]`, default port dropped), lower-cased; undefined for `null` or junk. */
const parseOrigin = (origin: string): { readonly scheme: string; readonly authority: string } | undefined => {
  const m = /^([a-z][a-z0-9+.-]*):\/\/([^/?#\s]+)$/i.exec(origin.trim())
  if (m === null) return undefined
  const scheme = (m[1] as string).toLowerCase()
  let authority = (m[2] as string).toLowerCase()
  if ((scheme === "http" && authority.endsWith(":80")) || (scheme === "https" && authority.endsWith(":443"))) {
    authority = authority.slice(0, authority.lastIndexOf(":"))
  }
  return { scheme, authority }
}

const normalizeOrigin = (origin: string): string => {
  const o = parseOrigin(origin)
  return o === undefined ? origin.trim().toLowerCase() : `${o.scheme}://${o.authority}`
}

/** Seconds between two log lines about refused requests of one kind. */
const REFUSAL_LOG_SECONDS = 10

/**
 * The 403 answer of a refused request, and its log line for the operator (a proxy's name missing
 * from --allowed-hosts shows up here). At most one line per code every 10 s, with the count of
 * those not shown: a page refused in a loop must not flood the log.
 */
const refusals = () => {
  const last = new Map<string, { at: number; suppressed: number }>()
  return (request: HttpServerRequest.HttpServerRequest, code: "FORBIDDEN_HOST" | "FORBIDDEN_ORIGIN", message: string) =>
    Effect.suspend(() => {
      const answer = HttpServerResponse.unsafeJson(errorBody(code, `Forbidden: ${message}`), { status: 403 })
      const now = Date.now()
      const seen = last.get(code)
      if (seen !== undefined && now - seen.at < REFUSAL_LOG_SECONDS * 1000) {
        seen.suppressed++
        return Effect.succeed(answer)
      }
      last.set(code, { at: now, suppressed: 0 })
      const more = seen !== undefined && seen.suppressed > 0 ? ` (and ${seen.suppressed} more ${code} since the last such line)` : ""
      const path = request.url.split("?", 1)[0]!.slice(0, 200)
      return Effect.as(Effect.logWarning(`refused ${request.method} ${path} (${code}): ${message}${more}`), answer)
    })
}

/** Request headers a foreign origin may send, and response headers it may read. */
const CORS_ALLOW_HEADERS = "authorization, content-type, mcp-session-id, mcp-protocol-version, mcp-method, mcp-name, last-event-id"
const CORS_EXPOSE_HEADERS = "mcp-session-id, retry-after, www-authenticate"

/**
 * The guard as an HTTP middleware: refuses a request whose Host or Origin is not allowed (403,
 * nothing routed), answers CORS preflights of allowed foreign origins, and adds the CORS headers to
 * their answers.
 */
export const guardRequests = (policy: RequestPolicy) => {
  const refuse = refusals()
  return <E, R>(
    app: HttpApp.HttpApp<HttpServerResponse.HttpServerResponse, E, R>
  ): HttpApp.HttpApp<HttpServerResponse.HttpServerResponse, E, R | HttpServerRequest.HttpServerRequest> =>
    Effect.withFiberRuntime((fiber) => {
      const request = Context.unsafeGet(fiber.currentContext, HttpServerRequest.HttpServerRequest)
      // Each read of `request.headers` builds a new Headers object: read it once.
      const headers = request.headers
      const host = headers["host"]
      const hostProblem = policy.hostProblem(host)
      if (hostProblem !== undefined) return refuse(request, "FORBIDDEN_HOST", hostProblem)
      const origin = headers["origin"]
      if (origin === undefined) {
        const site = headers["sec-fetch-site"]
        const navigation = (request.method === "GET" || request.method === "HEAD") && headers["sec-fetch-mode"] === "navigate"
        if ((site === "cross-site" || site === "same-site") && !navigation) {
          return refuse(request, "FORBIDDEN_ORIGIN", `a ${site} browser request without an Origin may not use this store`)
        }
        return app
      }
      const originProblem = policy.originProblem(origin, host as string)
      if (originProblem !== undefined) return refuse(request, "FORBIDDEN_ORIGIN", originProblem)
      if (!policy.isForeign(origin, host as string)) return app
      const cors = {
        "access-control-allow-origin": origin,
        "access-control-expose-headers": CORS_EXPOSE_HEADERS,
        vary: "Origin"
      }
      if (request.method === "OPTIONS" && headers["access-control-request-method"] !== undefined) {
        return Effect.succeed(
          HttpServerResponse.empty({
            status: 204,
            headers: {
              ...cors,
              "access-control-allow-methods": "GET, POST, PUT, PATCH, DELETE",
              "access-control-allow-headers": CORS_ALLOW_HEADERS,
              "access-control-max-age": "600"
            }
          })
        )
      }
      return Effect.zipRight(
        HttpApp.appendPreResponseHandler((_request, response) => Effect.succeed(HttpServerResponse.setHeaders(response, cors))),
        app
      )
    })
}

/** Whether the client of a request connects from a loopback address. */
export const fromLoopbackClient = (request: HttpServerRequest.HttpServerRequest): boolean =>
  Option.match(request.remoteAddress, { onNone: () => false, onSome: isLoopback })

/**
 * May this request define local (command) services? `disabled` with --no-local-services;
 * `remote-client` when the store has no API key (nor --auth-issuer) and the client is not on loopback (it can only be
 * when the store listens on the network), unless --allow-remote-local-services.
 */
export const localServicesPolicy = (
  options: Pick<ServerOptions, "localServices" | "apiKey" | "allowRemoteLocalServices" | "authIssuer">,
  request: HttpServerRequest.HttpServerRequest
): LocalServicesPolicy => {
  if (!options.localServices) return "disabled"
  // With an authorization server trusted, every request carries a key or a token: the client is known.
  if (options.apiKey !== undefined || options.authIssuer !== undefined || options.allowRemoteLocalServices || fromLoopbackClient(request)) return "allowed"
  return "remote-client"
}
