/**
 * The limit on one message read from an upstream, and the error that names a message over it. Apart
 * from the connection's contract (types.ts) so that the bounded fetch, which the OAuth requests use
 * too, depends on nothing else of src/mcp.
 */

/** The largest MCP message read from an upstream when no limit is given (the store's default). */
export const DEFAULT_MAX_MESSAGE_BYTES = 16 * 1024 * 1024

/**
 * An upstream sent one message (an HTTP body, an event of an event stream, a stdio line) longer
 * than the limit. Reading stopped there: the transport raises it through `onerror`, then closes.
 */
export class MessageTooLargeError extends Error {
  readonly _tag = "MessageTooLargeError"
  constructor(
    /** What was too large, e.g. "the HTTP answer" or "a line on stdout". */
    readonly what: string,
    readonly limitBytes: number
  ) {
    super(`${what} is larger than the ${limitBytes}-byte message limit (--max-message-bytes); reading stopped and the connection was closed`)
  }
}
