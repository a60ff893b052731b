package dev.sonde.client;

import java.nio.file.Files;
import java.nio.file.Path;

/** Paths in the repository, found from the {@code sonde.repo} property Maven sets. */
final class Repo {
    private Repo() {}

    static Path root() {
        String p = System.getProperty("sonde.repo");
        Path root = p != null ? Path.of(p) : Path.of(System.getProperty("user.dir"), "..", "..");
        root = root.toAbsolutePath().normalize();
        if (!Files.isDirectory(root.resolve("testdata/vectors"))) {
            throw new AssertionError("no testdata/vectors under " + root + "; run the tests from sdk/java");
        }
        return root;
    }

    static Path vectors() {
        return root().resolve("testdata/vectors");
    }
}
