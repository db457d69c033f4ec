/**
 * What the framework would answer in its own words, answered in the contract's (docs/api.md,
 * Conventions): request bodies checked before routing (content type, size read with a streaming
 * limit, well-formed JSON, an object, nesting depth), so a bad body is a 400, 413 or 415 and never
 * a defect, and parsed once (the contract decodes the value parsed here); and routing, decoding
 * and unexpected failures mapped to the contract's error body (404, 405, a path parameter the
 * router refused, field-by-field decode wording, a defect as 500 with a trace id).
 */
import * as HttpApiError from "@effect/platform/HttpApiError"
import * as HttpApiMiddleware from "@effect/platform/HttpApiMiddleware"
import * as HttpMethod from "@effect/platform/HttpMethod"
import * as HttpServerError from "@effect/platform/HttpServerError"
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as IncomingMessage from "@effect/platform/HttpIncomingMessage"
import * as NodeHttpServerRequest from "@effect/platform-node/NodeHttpServerRequest"
import { Cause, Effect, Layer, Option, ParseResult, Schema } from "effect"
import { nestedDeeperThan } from "../domain/json-depth.js"
import { fieldProblems, MAX_FIELD_PROBLEMS, problemsMessage, type FieldProblem } from "../domain/schemas.js"
import {
  BadRequest,
  errorBody,
  logInternal,
  MethodNotAllowed,
  NotFound,
  PayloadTooLarge,
  UnsupportedMediaType,
  validationError,
  type ApiError
} from "./contract-errors.js"

/** A route table entry: method and path pattern, e.g. `DELETE /for_store/delete_service/:service_name`. */
export interface RouteEntry {
  readonly method: string
  readonly path: string
}

/** The scheme and host of a request target in absolute form (`GET http://host/path`), as the router drops them. */
const ABSOLUTE_FORM = /^https?:\/\/.*?\//

/**
 * The request's path as the router reads it (find-my-way, strict: see `ROUTER_CONFIG`), so that
 * access, scopes and open routes are decided on the route that runs: the absolute form's scheme and
 * host dropped, the first character read as "/", cut at `?`, `;` or `#`, percent-decoded as `decodeURI` does (`%25` kept, so that a
 * path parameter is decoded once, later). Not `new URL(url, base)`: that reads "//x/y" as a host "x"
 * and path "/y" (so "//for_store/health" looked like the open "/health"), and throws on "//". A
 * malformed escape leaves the path as it came: the router finds no route for it.
 */
export const pathOf = (url: string): string => {
  const absolute = url.charCodeAt(0) === 47 ? url : url.replace(ABSOLUTE_FORM, "/")
  // The router reads the first character as the root's "/" whatever it is (`*for_store/show_config` is `/for_store/show_config`).
  const target = absolute.charCodeAt(0) === 47 ? absolute : `/${absolute.slice(1)}`
  const end = target.search(/[?;#]/)
  const path = end === -1 ? target : target.slice(0, end)
  if (!path.includes("%")) return path
  try {
    return decodeURI(path.replace(/%25/g, "%2525"))
  } catch {
    return path
  }
}

/**
 * The router's settings: one spelling per route. find-my-way's defaults read a path without regard
 * to letter case, doubled slashes or a trailing slash, so "//for_store/show_config" ran the route a
 * reader key is refused at "/for_store/show_config". A path parameter may be up to 16 KiB: over
 * find-my-way's 100 characters it is "no route", which the contract middleware could only answer
 * with 405, so the handler refuses it with 400 instead.
 */
export const ROUTER_CONFIG = { maxParamLength: 16_384, caseSensitive: true, ignoreTrailingSlash: false, ignoreDuplicateSlashes: false } as const

/**
 * Deepest nesting of arrays and objects a body may have. The schema decoder, its error formatter
 * and JSON.stringify (records, upstream requests) all recurse: a 10 KB body of nested arrays
 * overflows the stack. Refused before decoding, like malformed JSON.
 */
export const MAX_BODY_DEPTH = 64

const tooLarge = (limit: number) => new PayloadTooLarge(errorBody("PAYLOAD_TOO_LARGE", `Request body is over ${limit} bytes`, { limit }))

/** The body read so far, or why it was not: over the limit, or the client went away. */
type BodyRead = { readonly text: string } | { readonly tooLarge: true } | { readonly failed: Error }

/**
 * Reads a request body, counting bytes as they arrive: past `limit` reading stops at once (the
 * rest is never buffered; the answer, 413, closes the connection). Effect's own reader would
 * destroy the socket at its limit, leaving the client with no answer.
 */
const readBody = (request: HttpServerRequest.HttpServerRequest, limit: number): Effect.Effect<BodyRead> =>
  Effect.async<BodyRead>((resume) => {
    const source = NodeHttpServerRequest.toIncomingMessage(request)
    const chunks: Buffer[] = []
    let bytes = 0
    const done = (result: BodyRead) => {
      source.off("data", onData)
      source.off("end", onEnd)
      source.off("error", onError)
      resume(Effect.succeed(result))
    }
    const onData = (chunk: Buffer) => {
      bytes += chunk.length
      if (bytes > limit) {
        source.pause()
        return done({ tooLarge: true })
      }
      chunks.push(chunk)
    }
    const onEnd = () => done({ text: Buffer.concat(chunks, bytes).toString("utf8") })
    const onError = (e: Error) => done({ failed: e })
    source.on("data", onData)
    source.once("end", onEnd)
    source.once("error", onError)
    return Effect.sync(() => {
      source.off("data", onData)
      source.off("end", onEnd)
      source.off("error", onError)
    })
  })

/**
 * Hands a body read by `readBody` to the framework, which would read it again for its own uses:
 * the Node request caches its text in `textEffect` (platform-node's HttpIncomingMessageImpl, an
 * internal field: without it the fallback below answers an oversized chunked body by resetting the
 * connection, and test/http/contract-errors.test.ts fails).
 */
const canProvideText = (request: HttpServerRequest.HttpServerRequest): boolean => "textEffect" in request
const provideText = (request: HttpServerRequest.HttpServerRequest, text: string): void => {
  ;(request as { textEffect?: unknown }).textEffect = Effect.succeed(text)
}

/**
 * Hands the body parsed by the checks to the framework, so it is parsed once: HttpApiBuilder
 * reads a JSON payload through `request.json`, a getter of the request's class that parses the
 * text on every read (platform-node's HttpIncomingMessageImpl); an own property of the request
 * object shadows it with the value parsed here. test/http/contract-middleware.test.ts fails if a
 * framework update stops reading the body so.
 */
const provideJson = (request: HttpServerRequest.HttpServerRequest, json: unknown): void => {
  Object.defineProperty(request, "json", { value: Effect.succeed(json), configurable: true })
}

/**
 * Whether a media type is JSON: exactly `application/json`, parameters allowed. Not a substring
 * test: `text/plain; charset=application/json` is what a web page may send without a preflight.
 */
export const isJsonMediaType = (type: string): boolean => type.split(";", 1)[0]!.trim().toLowerCase() === "application/json"

/** Routes whose body may be a JSON array: add_service's list form, and JSON-RPC on the MCP endpoints. */
const arrayBodyAllowed = (path: string): boolean => /\/add_service\/?$/.test(path) || /^(\/for_agent\/[^/]+)?\/mcp\/?$/.test(path)

/**
 * The built-in authorization server's token and revocation endpoints (src/http/oauth-server/endpoints.ts):
 * OAuth sends their bodies form-encoded (RFC 6749, 4.1.3); and the upstream OAuth callback's
 * question, an HTML form posting to its own origin (the request guard refuses another). There, and
 * only there, that type is read too (bounded the same), and left to the handler to parse.
 */
const FORM_ROUTES: ReadonlySet<string> = new Set(["/oauth/token", "/oauth/revoke", "/oauth/callback"])
const isFormMediaType = (type: string | undefined): boolean => type !== undefined && type.split(";", 1)[0]!.trim().toLowerCase() === "application/x-www-form-urlencoded"

/**
 * The content type of a request that may carry a body: when a body is sent, or any content type
 * is named, it must be JSON (a web page can send any other type without a preflight).
 */
const mediaTypeProblem = (type: string | undefined, length: string | undefined, chunked: boolean): UnsupportedMediaType | undefined => {
  const hasBody = chunked || (length !== undefined && length !== "0")
  if (type === undefined ? !hasBody : isJsonMediaType(type)) return undefined
  const message = type === undefined ? "A request body needs 'Content-Type: application/json'" : `Content-Type must be application/json, not '${type.slice(0, 100)}'`
  return new UnsupportedMediaType(errorBody("UNSUPPORTED_MEDIA_TYPE", message, { content_type: type ?? null }))
}

/**
 * The body checks: well-formed JSON, an object (or an array where allowed), nesting depth. The
 * parsed body when it passes (null for an empty one, as the framework reads it), else the refusal.
 */
const parseBody = (text: string, path: string): { readonly json: unknown } | { readonly problem: BadRequest } => {
  if (text.length === 0) return { json: null }
  let parsed: unknown
  try {
    parsed = JSON.parse(text)
  } catch (e) {
    return { problem: validationError(`Malformed JSON body: ${(e as Error).message}`, [{ field: "body", problem: "is not valid JSON" }]) }
  }
  if (typeof parsed !== "object" || parsed === null || (Array.isArray(parsed) && !arrayBodyAllowed(path))) {
    const problem = `must be a JSON object${arrayBodyAllowed(path) ? " or array" : ""}, not ${parsed === null ? "null" : Array.isArray(parsed) ? "an array" : typeof parsed === "string" ? "a string" : typeof parsed === "number" ? "a number" : "a boolean"}`
    return { problem: validationError(`Invalid request: body ${problem}`, [{ field: "body", problem }]) }
  }
  if (nestedDeeperThan(parsed, MAX_BODY_DEPTH)) {
    const problem = `nests arrays and objects deeper than ${MAX_BODY_DEPTH} levels`
    return { problem: validationError(`Invalid request: body ${problem}`, [{ field: "body", problem }]) }
  }
  return { json: parsed }
}

/** The body checks (`parseBody`): undefined when the body passes, else the refusal. */
export const bodyProblem = (text: string, path: string): BadRequest | undefined => {
  const parsed = parseBody(text, path)
  return "problem" in parsed ? parsed.problem : undefined
}

/**
 * The body checks of every request, before routing: content type, size, JSON. An API-level
 * middleware of the contract (src/http/Api.ts), so it runs after the API key is checked
 * (src/http/authorization.ts): a request without the key learns nothing about its body.
 */
export class RequestBody extends HttpApiMiddleware.Tag<RequestBody>()("mcp-store/RequestBody", {
  failure: Schema.Union(UnsupportedMediaType, PayloadTooLarge, BadRequest)
}) {}

/** The body checks, with bodies over `maxBodyBytes` refused 413 (read no further than that). */
export const requestBodyLayer = (maxBodyBytes: number): Layer.Layer<RequestBody> =>
  Layer.succeed(
    RequestBody,
    // Written with plain combinators, not a generator: this runs on every request.
    RequestBody.of(
      Effect.flatMap(HttpServerRequest.HttpServerRequest, (request): Effect.Effect<void, UnsupportedMediaType | PayloadTooLarge | BadRequest> => {
        if (!HttpMethod.hasBody(request.method)) return Effect.void
        // Each read of `request.headers` builds a new Headers object: read it once.
        const headers = request.headers
        const length = headers["content-length"]
        const chunked = headers["transfer-encoding"] !== undefined
        const form = isFormMediaType(headers["content-type"]) && FORM_ROUTES.has(pathOf(request.url))
        const typeProblem = form ? undefined : mediaTypeProblem(headers["content-type"], length, chunked)
        if (typeProblem !== undefined) return Effect.fail(typeProblem)
        if (Number(length ?? "0") > maxBodyBytes) return Effect.fail(tooLarge(maxBodyBytes))
        if (length === undefined && !chunked) return Effect.void
        const checked = (text: string): Effect.Effect<void, BadRequest> => {
          if (form) return Effect.void
          const parsed = parseBody(text, pathOf(request.url))
          if ("problem" in parsed) return Effect.fail(parsed.problem)
          provideJson(request, parsed.json)
          return Effect.void
        }
        if (!canProvideText(request)) {
          // Not the Node request this was written for: the framework's reader, bounded (past the
          // limit it resets the connection instead of answering 413).
          return Effect.flatMap(
            IncomingMessage.withMaxBodySize(request.text, Option.some(maxBodyBytes)).pipe(Effect.mapError(() => tooLarge(maxBodyBytes))),
            checked
          )
        }
        return Effect.flatMap(readBody(request, maxBodyBytes), (read): Effect.Effect<void, PayloadTooLarge | BadRequest> => {
          if ("tooLarge" in read) return Effect.fail(tooLarge(maxBodyBytes))
          if ("failed" in read) return Effect.interrupt // the client went away mid-body: nobody to answer
          provideText(request, read.text)
          return checked(read.text)
        })
      })
    )
  )

/**
 * Describes a schema decode failure field by field, in words a client can act on (`fieldProblems`:
 * the domain's wording, or the decoder's default said plainly), at most `MAX_FIELD_PROBLEMS` of
 * them; a request without a body is told so.
 */
const decodeProblems = (e: HttpApiError.HttpApiDecodeError): Array<FieldProblem> =>
  fieldProblems(e.issues).map((p) =>
    p.field === "body" && p.problem === "must be an object (got null)" ? { field: "body", problem: "is missing: send a JSON object with this endpoint's fields" } : p
  )

const patternOf = (path: string) => new RegExp(`^${path.replace(/[.*+?^${}()|[\]\\]/g, "\\$&").replace(/:[A-Za-z_]+/g, "[^/]+")}$`)

/**
 * Why the router found no route for a path that has a route's shape and method: find-my-way drops
 * a match whose parameter is not valid percent-encoding (or longer than its maxParamLength), and
 * the request would otherwise be answered 405 with the very method it used.
 */
const refusedParameter = (routes: ReadonlyArray<RouteEntry>, method: string, path: string): { field: string; problem: string } => {
  const segments = path.split("/")
  for (const route of routes) {
    const parts = route.path.split("/")
    if (route.method !== method || parts.length !== segments.length) continue
    // Only a route whose fixed segments are the path's (`/for_store/calls/:call_id` is not `/for_store/approvals/...`).
    if (parts.some((part, i) => !part.startsWith(":") && part !== segments[i])) continue
    for (let i = 0; i < parts.length; i++) {
      const part = parts[i] as string
      if (!part.startsWith(":")) continue
      try {
        decodeURIComponent(segments[i] as string)
      } catch {
        return { field: part.slice(1), problem: "is not valid percent-encoded UTF-8" }
      }
    }
  }
  return { field: "path", problem: "has a parameter that cannot be read (too long or badly encoded)" }
}

/**
 * The API-level middleware around everything the router answers (for HttpApiBuilder.middleware):
 * routing and decoding failures become contract errors, a defect an INTERNAL_ERROR with a trace
 * id. `routes` (the contract's and the extra ones) tell a 405 from a 404.
 */
export const contractErrors = (routes: ReadonlyArray<RouteEntry>) => {
  const patterns = routes.map((r) => ({ method: r.method, pattern: patternOf(r.path) }))
  /** Routing and decoding failures in the contract's terms; anything else is already a contract error. */
  const contractError = (e: unknown): ApiError => {
    if (e instanceof HttpApiError.HttpApiDecodeError) {
      const fields = decodeProblems(e)
      return validationError(problemsMessage(fields), fields.slice(0, MAX_FIELD_PROBLEMS))
    }
    if (e instanceof HttpServerError.RouteNotFound) {
      const path = pathOf(e.request.url)
      const allowed = patterns.filter((p) => p.pattern.test(path)).map((p) => p.method)
      if (allowed.includes(e.request.method)) {
        const refused = refusedParameter(routes, e.request.method, path)
        return validationError(`Invalid request: ${refused.field} ${refused.problem}`, [refused])
      }
      return allowed.length > 0
        ? new MethodNotAllowed(errorBody("METHOD_NOT_ALLOWED", `Method ${e.request.method} is not allowed on ${path}; use ${allowed.join(", ")}`, { allowed }))
        : new NotFound(errorBody("NOT_FOUND", `No route ${e.request.method} ${path}`, { path }))
    }
    // Anything else is already a contract error (or a failure the framework encodes itself).
    return e as ApiError
  }
  const onCause = (cause: Cause.Cause<unknown>): Effect.Effect<never, ApiError> => {
    const failed = Cause.failureOption(cause)
    if (Option.isSome(failed)) return Effect.fail(contractError(failed.value))
    // Request decoding fails as HttpApiDecodeError (above). A ParseError defect comes from encoding
    // the answer (a response that does not fit its schema): the server's fault, never the client's.
    const defect = Cause.dieOption(cause)
    if (Option.isSome(defect)) {
      return logInternal(ParseResult.isParseError(defect.value) ? "response does not match its schema" : "unexpected defect", Cause.die(defect.value))
    }
    return Effect.failCause(cause as Cause.Cause<never>)
  }
  return <A, R>(app: Effect.Effect<A, unknown, R>): Effect.Effect<A, ApiError, R> => Effect.catchAllCause(app, onCause)
}
