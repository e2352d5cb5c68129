CREATE TABLE orders (id bigserial PRIMARY KEY, customer_id bigint NOT NULL, total numeric NOT NULL);
SET search_path = shop, public;
CREATE INDEX CONCURRENTLY orders_customer ON orders (customer_id);
