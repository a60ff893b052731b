package dev.sonde.client;

/**
 * The name and tag rules of SPEC.md ("Validation"). Each check throws an
 * {@link IllegalArgumentException} naming the offending text and
 * character; nothing invalid is ever dropped silently.
 *
 * <p>The checks are plain character loops because {@link #checkName} runs
 * on every emit: a 20-character name costs a few nanoseconds this way,
 * where a regular expression would cost a matcher allocation.
 */
final class Validation {
    private Validation() {}

    static void checkName(String name) {
        if (name == null) {
            throw new NullPointerException("metric name is null");
        }
        if (name.isEmpty()) {
            throw new IllegalArgumentException("metric name is empty");
        }
        int bad = forbiddenInName(name);
        if (bad >= 0) {
            throw new IllegalArgumentException(
                    "metric name " + quote(name) + " contains " + describe(name.charAt(bad))
                            + " at index " + bad
                            + "; names must not contain '|', '=', a space, '\\n' or '\\r'");
        }
    }

    static void checkPrefix(String prefix) {
        if (prefix == null) {
            throw new NullPointerException("prefix is null (use \"\" for no prefix)");
        }
        int bad = forbiddenInName(prefix);
        if (bad >= 0) {
            throw new IllegalArgumentException(
                    "prefix " + quote(prefix) + " contains " + describe(prefix.charAt(bad))
                            + " at index " + bad
                            + "; a prefix must not contain '|', '=', a space, '\\n' or '\\r'");
        }
    }

    static void checkTagKey(String key) {
        if (key == null) {
            throw new NullPointerException("tag key is null");
        }
        if (key.isEmpty()) {
            throw new IllegalArgumentException("tag key is empty");
        }
        int bad = forbiddenInTag(key);
        if (bad >= 0) {
            throw new IllegalArgumentException(
                    "tag key " + quote(key) + " contains " + describe(key.charAt(bad))
                            + " at index " + bad
                            + "; tag keys must not contain '|', '=', a space, '\\n' or '\\r'");
        }
    }

    static void checkTagValue(String key, String value) {
        if (value == null) {
            throw new NullPointerException("value of tag " + quote(key) + " is null");
        }
        int bad = forbiddenInTag(value);
        if (bad >= 0) {
            throw new IllegalArgumentException(
                    "value " + quote(value) + " of tag " + quote(key) + " contains "
                            + describe(value.charAt(bad)) + " at index " + bad
                            + "; tag values must not contain '|', '=', a space, '\\n' or '\\r'");
        }
    }

    static void checkValue(String name, double value) {
        if (!Double.isFinite(value)) {
            throw new IllegalArgumentException(
                    "value of " + quote(name) + " is " + value + "; only finite numbers can be sent");
        }
    }

    /** Index of the first character not allowed in a name or prefix, or -1. */
    private static int forbiddenInName(String s) {
        for (int i = 0, n = s.length(); i < n; i++) {
            char c = s.charAt(i);
            if (c == '|' || c == '=' || c == ' ' || c == '\n' || c == '\r') {
                return i;
            }
        }
        return -1;
    }

    /** Index of the first character not allowed in a tag key or value, or -1. */
    private static int forbiddenInTag(String s) {
        for (int i = 0, n = s.length(); i < n; i++) {
            char c = s.charAt(i);
            if (c == '|' || c == '=' || c == ' ' || c == '\n' || c == '\r') {
                return i;
            }
        }
        return -1;
    }

    private static String describe(char c) {
        switch (c) {
            case ' ':
                return "a space";
            case '\n':
                return "a newline '\\n'";
            case '\r':
                return "a carriage return '\\r'";
            default:
                return "'" + c + "'";
        }
    }

    /** The text in quotes with line breaks made visible, for error messages. */
    static String quote(String s) {
        return '"' + s.replace("\n", "\\n").replace("\r", "\\r") + '"';
    }
}
